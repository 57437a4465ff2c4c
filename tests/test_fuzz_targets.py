"""The libFuzzer targets (cext/fuzz/): each builds with clang, ASan and UBSan, and a
short run from its committed seed corpus finds no crash, leak, sanitizer report or
broken property (each target aborts on the property it checks).

A short budget each (RUN_SECONDS), so CI keeps the targets building and catches what a
short run finds; `make fuzz` runs them for an hour each.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FUZZ = REPO / "cext" / "fuzz"
TARGETS = (
    "fuzz_batchdec", "fuzz_seal", "fuzz_receiver", "fuzz_cni_json", "fuzz_cni_frame", "fuzz_emul",
)  # fmt: skip
RUN_SECONDS = 10

pytestmark = pytest.mark.skipif(shutil.which("clang") is None, reason="clang is not installed")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fuzz")
    subprocess.run(
        ["bash", str(FUZZ / "build.sh"), *TARGETS],
        env=os.environ | {"FUZZ_OUT": str(out)},
        check=True,
        capture_output=True,
        timeout=600,
    )
    return out


def test_every_target_has_seeds_and_is_built_by_the_scripts() -> None:
    on_disk = {path.stem for path in FUZZ.glob("fuzz_*.c")}
    assert on_disk == set(TARGETS)
    for target in TARGETS:
        assert any((FUZZ / "corpus" / target).iterdir()), target
        assert f"[{target}]=" in (FUZZ / "build.sh").read_text()
        assert target in (FUZZ / "run.sh").read_text()


@pytest.mark.parametrize("target", TARGETS)
def test_a_short_run_from_the_seeds_finds_nothing(built: Path, tmp_path: Path, target: str) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(FUZZ / "corpus" / target, corpus)
    done = subprocess.run(
        [
            str(built / target),
            str(corpus),
            f"-max_total_time={RUN_SECONDS}",
            "-timeout=10",
            "-rss_limit_mb=1024",
            f"-artifact_prefix={tmp_path}/",
            "-print_final_stats=1",
        ],
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS + 300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    executed = [
        line for line in done.stderr.splitlines() if line.startswith("stat::number_of_executed")
    ]
    assert executed and int(executed[0].split()[-1]) > 0, done.stderr[-3000:]
