"""Moving a worker into its own cgroup, so that it outlives its control process's.

A container runtime stops a container by killing every process of its cgroup.
A worker that must outlive the daemon's container (a DaemonSet restart) moves
itself into `dataplane.worker_cgroup` under `dataplane.cgroup_root` (the host's
cgroup v2 hierarchy, mounted into the container) before it serves.
"""

from __future__ import annotations

import os
from pathlib import Path


class CgroupError(OSError):
    """The worker cannot join its cgroup; the message says which and why."""


def join(root: str, name: str) -> Path:
    """Moves the calling process into cgroup `name` under the v2 hierarchy at `root`,
    creating it; returns its directory. Raises CgroupError if `root` is not cgroup v2
    or the move is refused."""
    base = Path(root)
    if not (base / "cgroup.controllers").exists():
        raise CgroupError(f"dataplane.cgroup_root {root}: not a cgroup v2 hierarchy")
    group = base / name
    try:
        group.mkdir(parents=True, exist_ok=True)
        (group / "cgroup.procs").write_text(f"{os.getpid()}\n")
    except OSError as exc:
        raise CgroupError(f"dataplane.worker_cgroup {group}: {exc.strerror or exc}") from None
    return group
