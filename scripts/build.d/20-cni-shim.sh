#!/usr/bin/env bash
# Builds the C CNI shim (cext/cni_shim.c -> cext/build/meshwire-cni), hardened.
# Static (static-pie: its load address is still random) because `meshwire cni
# install` copies the shim onto the host, where the container runtime runs it
# against the host's libc, which may be older than the one it was built with.
set -euo pipefail
exec bash scripts/hardened-cc.sh cext/cni_shim.c cext/build/meshwire-cni "${BASH_SOURCE[0]}" -static-pie
