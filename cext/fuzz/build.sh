#!/usr/bin/env bash
# Builds the libFuzzer targets (cext/fuzz/fuzz_*.c) with clang, ASan and UBSan into
# cext/build/fuzz/<target> (FUZZ_OUT: another folder). Prints each binary's path.
# Usage: cext/fuzz/build.sh [TARGET...] (default: all).
# Needs clang and its runtime (Debian: clang, libclang-rt-14-dev; scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
CC=${FUZZ_CC:-clang}
out=${FUZZ_OUT:-cext/build/fuzz}
mkdir -p "$out"
flags=(-g -O1 -std=gnu11 -Icext -fsanitize=fuzzer,address,undefined
  -fno-sanitize-recover=undefined -fno-omit-frame-pointer -Wall -Wextra)
# What each target compiles besides itself, and links.
declare -A sources=(
  [fuzz_batchdec]="cext/batchmsg.c"
  [fuzz_seal]="cext/seal.c"
  [fuzz_receiver]="cext/h2receiver.c cext/h2io.c cext/batchmsg.c cext/wirec.c cext/seal.c"
  [fuzz_cni_json]=""
  [fuzz_cni_frame]=""
  [fuzz_emul]="cext/emul.c"
)
declare -A libs=(
  [fuzz_seal]="-lcrypto"
  [fuzz_receiver]="-lnghttp2 -lcrypto"
)
targets=("$@")
((${#targets[@]})) || targets=("${!sources[@]}")
for target in "${targets[@]}"; do
  [[ -v sources[$target] ]] || { echo "build.sh: no fuzz target $target" >&2; exit 2; }
  # shellcheck disable=SC2086  # the lists are space-separated on purpose
  "$CC" "${flags[@]}" -o "$out/$target.tmp" "cext/fuzz/$target.c" ${sources[$target]} \
    ${libs[$target]:-}
  mv -f "$out/$target.tmp" "$out/$target"
  echo "$out/$target"
done
