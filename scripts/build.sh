#!/usr/bin/env bash
# Builds the generated and compiled parts (each step is a file in scripts/build.d/,
# run in name order with the virtualenv's python on PATH). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
for step in scripts/build.d/*.sh; do
  [[ -e $step ]] || continue
  bash "$step"
done
