#!/usr/bin/env bash
# Runs the libFuzzer targets, each for FUZZ_SECONDS (default 3600), one after another.
# Usage: cext/fuzz/run.sh [TARGET...] (default: all). Builds them first (build.sh).
#
# Each target works in cext/build/fuzz/runs/<target>/: `corpus/` starts as a copy of
# the committed seeds (cext/fuzz/corpus/<target>/) and keeps what the run found;
# crashes, leaks and timeouts land in `crashes/`, and the log in `log`. A target that
# fails stops the script with its status; keep its input as a regression seed.
# Extra libFuzzer flags for every target: FUZZ_FLAGS.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${FUZZ_SECONDS:-3600}
targets=("$@")
((${#targets[@]})) || targets=(fuzz_batchdec fuzz_seal fuzz_receiver fuzz_cni_json fuzz_cni_frame fuzz_emul)
bash cext/fuzz/build.sh "${targets[@]}" >/dev/null
for target in "${targets[@]}"; do
  work=cext/build/fuzz/runs/$target
  mkdir -p "$work/corpus" "$work/crashes"
  cp -n cext/fuzz/corpus/"$target"/* "$work/corpus/"
  echo "fuzz: $target for ${seconds}s (log: $work/log)"
  # shellcheck disable=SC2086  # FUZZ_FLAGS is a list of flags
  if ! cext/build/fuzz/"$target" "$work/corpus" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=1024 -artifact_prefix="$work/crashes/" -print_final_stats=1 \
    ${FUZZ_FLAGS:-} >"$work/log" 2>&1; then
    echo "fuzz: $target FAILED; see $work/log and $work/crashes/" >&2
    tail -n 30 "$work/log" >&2
    exit 1
  fi
  grep -E '^stat::number_of_executed_units|^#[0-9]+.*DONE' "$work/log" | tail -n 2
done
