#!/usr/bin/env bash
# Builds the C CNI shim (cext/cni_shim.c -> cext/build/meshwire-cni): libc only,
# warnings are errors. Rebuilds only when the source is newer than the binary;
# the binary appears atomically, so a concurrent build or test never execs half a file.
set -euo pipefail
src=cext/cni_shim.c
out=cext/build/meshwire-cni
[[ -f $src ]] || exit 0
if [[ -x $out && ! $src -nt $out ]]; then
  exit 0
fi
mkdir -p "$(dirname "$out")"
tmp=$(mktemp "$out.XXXXXX")
trap 'rm -f "$tmp"' EXIT
${CC:-cc} -O2 -Wall -Wextra -Werror -std=c11 -o "$tmp" "$src"
chmod 0755 "$tmp"
mv -f "$tmp" "$out"
trap - EXIT
