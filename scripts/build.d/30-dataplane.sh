#!/usr/bin/env bash
# Compiles the dataplane's C batching codec (cext/wirec.c) into
# dataplane/_wirec.<abi>.so (gitignored), rebuilding only when a source changed.
set -euo pipefail
so=$(ls dataplane/_wirec.*.so 2>/dev/null | head -n1 || true)
if [[ -n $so && $so -nt cext/wirec.c && $so -nt cext/wirec.h && $so -nt cext/wirec_build.py ]]; then
  exit 0
fi
built=$(python cext/wirec_build.py | tail -n1)
rm -f dataplane/_wirec.*.so
cp "$built" dataplane/
