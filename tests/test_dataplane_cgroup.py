"""A worker joins its cgroup, on cgroup v2 or in every v1 hierarchy, and says why it cannot.

Stand-in trees of plain files check what is written where: a test moving a
real process would take it out of the cgroups the test itself runs in.
"""

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

    (group,) = cgroup.join(str(root), "meshwire-workers")

    assert group == root / "meshwire-workers"
    assert (group / "cgroup.procs").read_text() == f"{os.getpid()}\n"


def test_on_cgroup_v1_the_worker_joins_every_hierarchy_and_a_cpuset_gets_its_parents_cpus(
    tmp_path: Path,
) -> None:
    for hierarchy in ("cpuset", "freezer", "memory"):
        (tmp_path / hierarchy).mkdir()
        (tmp_path / hierarchy / "cgroup.procs").write_text("1\n")
    (tmp_path / "cpuset" / "cpuset.cpus").write_text("0-1\n")
    (tmp_path / "cpuset" / "cpuset.mems").write_text("0\n")
    (tmp_path / "cpuset" / "meshwire-workers").mkdir()
    for name in ("cpuset.cpus", "cpuset.mems"):  # as the kernel makes them: empty
        (tmp_path / "cpuset" / "meshwire-workers" / name).write_text("")

    joined = cgroup.join(str(tmp_path), "meshwire-workers")

    assert [g.parent.name for g in joined] == ["cpuset", "freezer", "memory"]
    for group in joined:
        assert (group / "cgroup.procs").read_text() == f"{os.getpid()}\n"
    assert (joined[0] / "cpuset.cpus").read_text() == "0-1\n"
    assert (joined[0] / "cpuset.mems").read_text() == "0\n"


def test_a_root_that_holds_no_hierarchy_is_refused_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(cgroup.CgroupError, match=r"dataplane\.cgroup_root .*not a cgroup hier"):
        cgroup.join(str(tmp_path), "meshwire-workers")
    assert not (tmp_path / "meshwire-workers").exists()


def test_a_cgroup_that_cannot_be_made_is_refused_naming_the_key(tmp_path: Path) -> None:
    root = v2_root(tmp_path)
    (root / "taken").write_text("a file, not a cgroup\n")

    with pytest.raises(cgroup.CgroupError, match=r"dataplane\.worker_cgroup"):
        cgroup.join(str(root), "taken")
