#!/usr/bin/env bash
# ruff (lint + format check) and mypy --strict over the whole project.
# mypy cannot follow setuptools' editable import hook, so it reads the packages
# through a link tree build/mypy/meshwire/{base,control,dataplane,proto,tools} -> the folders.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
ruff check .
ruff format --check .
tree=build/mypy/meshwire
mkdir -p "$tree"
for pkg in base control dataplane proto tools; do
  ln -sfn "$PWD/$pkg" "$tree/$pkg"
done
MYPYPATH=build/mypy mypy -p meshwire.base -p meshwire.control -p meshwire.dataplane -p meshwire.tools "$@"
