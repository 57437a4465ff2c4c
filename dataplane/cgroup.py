"""Moving a worker into its own cgroup, so that it outlives its control process's.

A container runtime stops a container by killing every process of its cgroup.
A worker that must outlive the daemon's container (a DaemonSet restart) moves
itself into `dataplane.worker_cgroup` under `dataplane.cgroup_root` (the host's
cgroup hierarchy, mounted into the container) before it serves.

`cgroup_root` is either a cgroup v2 mount (it has `cgroup.controllers`) or, on a
cgroup v1 host, the folder holding one mount per v1 hierarchy (and perhaps a
v2 `unified` one): the worker then joins the cgroup of that name in every
hierarchy, so none of them still counts it as the container's. A new v1 cpuset
cgroup is given its parent's CPUs and memory nodes (it starts with none, and
takes no process until it has some).
"""

from __future__ import annotations

import os
from pathlib import Path


class CgroupError(OSError):
    """The worker cannot join its cgroup; the message says which and why."""


def join(root: str, name: str) -> list[Path]:
    """Moves the calling process into cgroup `name` under the hierarchy (or the v1
    hierarchies) at `root`, creating it; returns the cgroups joined. Raises CgroupError
    if `root` holds no cgroup hierarchy or a move is refused."""
    base = Path(root)
    if (base / "cgroup.controllers").exists():
        hierarchies = [base]
    else:
        try:
            hierarchies = sorted(d for d in base.iterdir() if (d / "cgroup.procs").exists())
        except OSError:
            hierarchies = []
    if not hierarchies:
        raise CgroupError(f"dataplane.cgroup_root {root}: not a cgroup hierarchy")
    joined = []
    for hierarchy in hierarchies:
        group = hierarchy / name
        try:
            group.mkdir(parents=True, exist_ok=True)
            for inherited in ("cpuset.cpus", "cpuset.mems"):
                mine, parents = group / inherited, hierarchy / inherited
                if mine.exists() and parents.exists() and not mine.read_text().strip():
                    mine.write_text(parents.read_text())
            (group / "cgroup.procs").write_text(f"{os.getpid()}\n")
        except OSError as exc:
            raise CgroupError(f"dataplane.worker_cgroup {group}: {exc.strerror or exc}") from None
        joined.append(group)
    return joined
