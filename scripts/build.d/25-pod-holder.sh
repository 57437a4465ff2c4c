#!/usr/bin/env bash
# Builds the lab's pod holder (cext/pod_holder.c -> cext/build/meshwire-pod): libc only,
# warnings are errors, hardened (fortified, stack protector, PIE, full RELRO). It runs
# as root and mounts inside each lab pod, so it takes no input it does not check.
# Rebuilds only when the source or this script is newer than the binary; the
# binary appears atomically, so a concurrent build or test never execs half a file.
set -euo pipefail
src=cext/pod_holder.c
out=cext/build/meshwire-pod
[[ -f $src ]] || exit 0
if [[ -x $out && ! $src -nt $out && ! ${BASH_SOURCE[0]} -nt $out ]]; then
  exit 0
fi
mkdir -p "$(dirname "$out")"
tmp=$(mktemp "$out.XXXXXX")
trap 'rm -f "$tmp"' EXIT
${CC:-cc} -O2 -Wall -Wextra -Werror -std=c11 -D_FORTIFY_SOURCE=2 -fstack-protector-strong \
  -fPIE -pie -Wl,-z,relro,-z,now -o "$tmp" "$src"
chmod 0755 "$tmp"
mv -f "$tmp" "$out"
trap - EXIT
