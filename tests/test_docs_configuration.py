"""docs/configuration.md is scripts/config-docs.py's output, so it names every key the
config model has, with the default and the meaning the daemon uses."""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

import yaml

from meshwire.control.common.config import defaults_yaml

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "configuration.md"
SCRIPT = ROOT / "scripts" / "config-docs.py"


def generated() -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, check=True, timeout=120
    )
    return done.stdout


def test_the_page_is_what_the_script_writes() -> None:
    diff = "".join(
        difflib.unified_diff(
            PAGE.read_text().splitlines(True),
            generated().splitlines(True),
            "docs/configuration.md",
            "scripts/config-docs.py",
        )
    )
    assert not diff, (
        "docs/configuration.md is out of date: run "
        "`.venv/bin/python scripts/config-docs.py > docs/configuration.md`\n" + diff
    )


def test_every_key_config_defaults_prints_has_a_row() -> None:
    def keys(tree: dict[str, object], prefix: str = "") -> set[str]:
        out: set[str] = set()
        for name, value in tree.items():
            out |= keys(value, f"{prefix}{name}.") if isinstance(value, dict) else {prefix + name}
        return out

    rows = {
        line.split("|")[1].strip().strip("`")
        for line in PAGE.read_text().splitlines()
        if line.startswith("| `")
    }
    assert rows == keys(yaml.safe_load(defaults_yaml()))
