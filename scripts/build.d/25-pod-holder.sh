#!/usr/bin/env bash
# Builds the lab's pod holder (cext/pod_holder.c -> cext/build/meshwire-pod), hardened.
# It runs as root and mounts inside each lab pod, so it takes no input it does not check.
set -euo pipefail
exec bash scripts/hardened-cc.sh cext/pod_holder.c cext/build/meshwire-pod "${BASH_SOURCE[0]}" -pie
