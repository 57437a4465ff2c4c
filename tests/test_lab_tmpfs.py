"""The default lab directory is a tmpfs of its own where its root is not one."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshwire.tools.lab import tmpfs
from meshwire.tools.lab.state import LabDir, LabState

pytestmark = pytest.mark.root


def mount_points() -> list[str]:
    return [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """A directory on the disk filesystem pytest's tmp_path lives on; anything the test
    mounted under it is unmounted afterwards."""
    yield tmp_path
    for point in reversed(mount_points()):
        if point.startswith(str(tmp_path)):
            subprocess.run(["umount", "-l", point], check=False)


def test_a_lab_directory_on_disk_gets_its_own_tmpfs_and_loses_it_on_remove(root: Path) -> None:
    if tmpfs.on_tmpfs(root):
        pytest.skip(f"{root} is already on a tmpfs: nothing to mount")
    lab = LabDir(root / "lab", own_tmpfs=True)
    lab.create()
    assert tmpfs.on_tmpfs(lab.path) and tmpfs.ours(lab.path)
    lab.save(LabState(name="t", directory=str(lab.path)))
    assert json.loads(lab.state_file.read_text())["name"] == "t"
    assert lab.remove(whole=True)
    assert not lab.path.exists() and str(lab.path) not in mount_points()


def test_a_crash_before_the_state_file_leaves_an_empty_mount_down_removes(root: Path) -> None:
    if tmpfs.on_tmpfs(root):
        pytest.skip(f"{root} is already on a tmpfs: nothing to mount")
    lab = LabDir(root / "lab", own_tmpfs=True)
    lab.create()
    assert lab.remove(whole=False)
    assert not lab.path.exists() and str(lab.path) not in mount_points()


def test_no_mount_under_a_tmpfs_without_the_flag_or_for_another_mount(root: Path) -> None:
    parent = root / "run"
    parent.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "mwttmpfs", str(parent)], check=True)
    lab = LabDir(parent / "lab", own_tmpfs=True)
    lab.create()
    assert str(lab.path) not in mount_points() and tmpfs.on_tmpfs(lab.path)
    # Another tmpfs (not named as the lab's) is never unmounted by a lab.
    assert not tmpfs.ours(parent)
    tmpfs.unmount(parent)
    assert str(parent) in mount_points()
    plain = LabDir(root / "plain")
    plain.create()
    assert str(plain.path) not in mount_points()
    assert plain.remove(whole=True) and not plain.path.exists()
