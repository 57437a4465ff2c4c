"""The link reconciler's behaviour as scripts (tests/testdata/reconciler/*.txt).

Each script is a situation from the user's side (a peer pod restarts, a link
leaves a running topology, the daemon restarts over its links, an operation
fails before the initial reconciliation) told as topology changes, kernel
facts and injected failures, with the log of link operations, the kernel and
the rows' health it must lead to. `reconciler_helpers.py` documents the commands.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from reconciler_helpers import SCRIPTS, run_script

SCRIPT_FILES = sorted(SCRIPTS.glob("*.txt"))


def test_every_scenario_script_is_run() -> None:
    assert len(SCRIPT_FILES) >= 7


@pytest.mark.parametrize("script", SCRIPT_FILES, ids=lambda p: p.stem)
async def test_scenario(script: Path) -> None:
    await run_script(script.name, _read(script))


def _read(path: Path) -> str:
    return path.read_text()
