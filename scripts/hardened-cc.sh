#!/usr/bin/env bash
# One C program of libc only, built hardened with warnings as errors:
#   scripts/hardened-cc.sh SRC OUT CALLER [LINK-FLAG...]
# Hardened as far as the link allows: checked libc calls (_FORTIFY_SOURCE=2),
# stack canaries, a position-independent executable and read-only relocations
# resolved at start. LINK-FLAG is `-pie` for a dynamic program or `-static-pie`
# for one that must run against any host's libc.
# Rebuilds only when SRC, CALLER (the build.d script) or this script is newer than
# OUT; OUT appears atomically, so a concurrent build or test never execs half a file.
set -euo pipefail
src=$1 out=$2 caller=$3
shift 3
[[ -f $src ]] || exit 0
if [[ -x $out && ! $src -nt $out && ! $caller -nt $out && ! ${BASH_SOURCE[0]} -nt $out ]]; then
  exit 0
fi
mkdir -p "$(dirname "$out")"
tmp=$(mktemp "$out.XXXXXX")
trap 'rm -f "$tmp"' EXIT
${CC:-cc} -O2 -Wall -Wextra -Werror -Wformat -Wformat-security -std=c11 \
  -D_FORTIFY_SOURCE=2 -fstack-protector-strong -fPIE "$@" \
  -Wl,-z,relro,-z,now -o "$tmp" "$src"
chmod 0755 "$tmp"
mv -f "$tmp" "$out"
trap - EXIT
