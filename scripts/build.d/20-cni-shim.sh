#!/usr/bin/env bash
# Builds the C CNI shim (cext/cni_shim.c -> cext/build/meshwire-cni): libc only,
# linked statically (static-pie), hardened, warnings are errors. Static because `meshwire cni install`
# copies the shim onto the host, where the container runtime runs it against
# the host's libc, which may be older than the one it was built with.
# Rebuilds only when the source or this script is newer than the binary; the
# binary appears atomically, so a concurrent build or test never execs half a file.
set -euo pipefail
src=cext/cni_shim.c
out=cext/build/meshwire-cni
[[ -f $src ]] || exit 0
if [[ -x $out && ! $src -nt $out && ! ${BASH_SOURCE[0]} -nt $out ]]; then
  exit 0
fi
mkdir -p "$(dirname "$out")"
tmp=$(mktemp "$out.XXXXXX")
trap 'rm -f "$tmp"' EXIT
# Hardened as far as a static binary allows: checked libc calls, stack canaries,
# a position-independent executable (static-pie: its load address is random) and
# read-only relocations resolved at start.
${CC:-cc} -O2 -Wall -Wextra -Werror -Wformat -Wformat-security -std=c11 \
  -D_FORTIFY_SOURCE=2 -fstack-protector-strong -fPIE -static-pie \
  -Wl,-z,relro,-z,now -o "$tmp" "$src"
chmod 0755 "$tmp"
mv -f "$tmp" "$out"
trap - EXIT
