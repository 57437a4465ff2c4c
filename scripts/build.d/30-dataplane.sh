#!/usr/bin/env bash
# Compiles the dataplane's C parts (cext/*.c, cext/*.h, see cext/wirec_build.py) into
# dataplane/_wirec.<abi>.so (gitignored), rebuilding only when a source changed.
set -euo pipefail
so=$(ls dataplane/_wirec.*.so 2>/dev/null | head -n1 || true)
if [[ -n $so ]]; then
  stale=$(find cext -maxdepth 1 \( -name '*.c' -o -name '*.h' -o -name 'wirec_build.py' \) \
    ! -name cni_shim.c -newer "$so" | head -n1)
  [[ -z $stale ]] && exit 0
fi
built=$(python cext/wirec_build.py | tail -n1)
rm -f dataplane/_wirec.*.so
cp "$built" dataplane/
