"""A worker joins its cgroup only on a cgroup v2 hierarchy, and says why it cannot."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from meshwire.dataplane import cgroup


def v2_root(tmp_path: Path) -> Path:
    """A stand-in for a cgroup v2 mount: the file that marks one, nothing else."""
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    return tmp_path


def test_the_worker_writes_its_pid_into_the_cgroup_it_creates(tmp_path: Path) -> None:
    root = v2_root(tmp_path)

    group = cgroup.join(str(root), "meshwire-workers")

    assert group == root / "meshwire-workers"
    assert (group / "cgroup.procs").read_text() == f"{os.getpid()}\n"


def test_a_root_that_is_not_cgroup_v2_is_refused_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(cgroup.CgroupError, match=r"dataplane\.cgroup_root .*not a cgroup v2"):
        cgroup.join(str(tmp_path), "meshwire-workers")
    assert not (tmp_path / "meshwire-workers").exists()


def test_a_cgroup_that_cannot_be_made_is_refused_naming_the_key(tmp_path: Path) -> None:
    root = v2_root(tmp_path)
    (root / "taken").write_text("a file, not a cgroup\n")

    with pytest.raises(cgroup.CgroupError, match=r"dataplane\.worker_cgroup"):
        cgroup.join(str(root), "taken")
