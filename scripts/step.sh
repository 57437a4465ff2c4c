#!/usr/bin/env bash
# Runs one step of a make target and prints how long it took, whatever its outcome:
#   step: NAME: N s, exit S
# Usage: bash scripts/step.sh NAME CMD...
set -uo pipefail
name=$1; shift
start=$(date +%s)
"$@"
status=$?
echo "step: $name: $(( $(date +%s) - start )) s, exit $status" >&2
exit $status
