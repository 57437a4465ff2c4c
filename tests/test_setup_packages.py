"""scripts/setup.sh: `make lab` installs what a lab needs, `make test` the rest.

The package lists come from the script itself (`--packages`), so what is checked is what a
fresh machine would get.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.paths import REPO

SETUP = REPO / "scripts" / "setup.sh"
STEP = REPO / "scripts" / "step.sh"
# What only the suite drives: a lab user should not get a browser or a container runtime.
TEST_ONLY = {"chromium", "containerd", "runc", "debootstrap", "frr", "lldpd", "clang"}


def packages(mode: str) -> list[str]:
    out = subprocess.run(
        ["bash", str(SETUP), mode, "--packages"], check=True, stdout=subprocess.PIPE, text=True
    ).stdout
    return out.split()


def test_lab_needs_no_test_tools() -> None:
    lab = packages("lab")
    assert "iproute2" in lab and "libnghttp2-dev" in lab
    assert TEST_ONLY.isdisjoint(lab), TEST_ONLY & set(lab)


def test_test_mode_adds_the_suites_tools_to_the_labs() -> None:
    lab, test = packages("lab"), packages("test")
    assert set(lab) <= set(test)
    assert set(test) >= TEST_ONLY


def test_unknown_mode_is_refused_naming_it() -> None:
    done = subprocess.run(["bash", str(SETUP), "labs"], stderr=subprocess.PIPE, text=True)
    assert done.returncode == 2
    assert "'labs'" in done.stderr


@pytest.mark.parametrize("status", [0, 3])
def test_step_prints_its_time_and_keeps_the_exit_status(status: int) -> None:
    done = subprocess.run(
        ["bash", str(STEP), "demo", "bash", "-c", f"exit {status}"],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert done.returncode == status
    assert re.search(rf"^step: demo: \d+ s, exit {status}$", done.stderr, re.M), done.stderr
