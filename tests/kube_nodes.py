"""A real cluster of several nodes on one machine: one control plane, N real nodes, one underlay.

`Cluster(binaries, size)` is a `ControlPlane` (tests/kube_cluster.py), an `Underlay`
(tests/kube_underlay.py) and `size` `Node`s (tests/kube_node.py), each with its own
kubelet and containerd in its own network and mount namespaces and cgroup root, its
address on the underlay. The first node runs the cluster's one kube-scheduler and
kube-controller-manager. Nodes start side by side (most of a start is waiting).

`stop()` stops the first node first (its controllers, so nothing makes pods again),
then the others, each deleting its own pods through the API so their CNI DEL runs,
then the underlay and the control plane; it is safe after a failed start.

`usage(seconds)` measures what the cluster's processes cost over a window: every
process of the control plane, every process in a node's netns (kubelet, containerd, the
shims, the hostNetwork pods and the dataplane workers) and every process under a
node's cgroup root (the pods' containers).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tests.kube_cluster import ControlPlane
from tests.kube_node import Node
from tests.kube_underlay import Underlay


@dataclass(frozen=True)
class Usage:
    """What a set of processes cost: memory now, CPU over `seconds`."""

    processes: int
    rss_mib: float  # the sum of each process's RSS (shared pages counted in each)
    pss_mib: float  # the sum of each process's PSS (shared pages divided among them)
    cpu_percent: float  # of one core, over the window
    seconds: float


class Cluster:
    """See the module doc. `nodes[0]` runs the controllers."""

    def __init__(self, binaries: Path, size: int = 3) -> None:
        self.plane = ControlPlane(binaries)
        self.underlay: Underlay | None = None
        self.binaries = binaries
        self.size = size
        self.nodes: list[Node] = []

    def start(self) -> None:
        try:
            self.plane.start()
            self.underlay = Underlay()
            self.nodes = [
                Node(
                    self.plane,
                    self.binaries,
                    ip=self.underlay.address(i),
                    underlay=self.underlay,
                    controllers=i == 0,
                )
                for i in range(self.size)
            ]
            self._each(Node.start)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        if self.underlay is not None:
            self.underlay.close()
        self.plane.stop()

    def _each(self, action: Callable[[Node], object]) -> None:
        """`action(node)` on every node at once; the first failure is raised once all end."""
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            for future in [pool.submit(action, node) for node in self.nodes]:
                future.result()

    def import_image(self, archive: Path) -> None:
        self._each(lambda node: node.import_image(archive))

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise LookupError(f"no node {name} in this cluster")

    # -- what it costs ------------------------------------------------------------------

    def pids(self) -> set[int]:
        """Every process of the cluster (see the module doc)."""
        pids = {p.pid for p in (self.plane.etcd, self.plane.apiserver) if p is not None}
        netns = set()
        for node in self.nodes:
            pids.update(proc.pid for proc in node.procs.values() if proc.poll() is None)
            with contextlib.suppress(OSError):
                info = os.stat(node.netns)
                netns.add((info.st_dev, info.st_ino))
            base = Path("/sys/fs/cgroup/pids") / node.cgroup_root.lstrip("/")
            for procs in base.rglob("cgroup.procs"):
                with contextlib.suppress(OSError):
                    pids.update(int(pid) for pid in procs.read_text().split())
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                info = os.stat(entry / "ns" / "net")
                if (info.st_dev, info.st_ino) in netns:
                    pids.add(int(entry.name))
        return pids

    def usage(self, seconds: float = 10.0) -> Usage:
        """The cluster's processes' memory, and their CPU over the next `seconds`."""
        before = _cpu_ticks(self.pids())
        start = time.monotonic()
        time.sleep(seconds)
        pids = self.pids()
        after = _cpu_ticks(pids)
        elapsed = time.monotonic() - start
        # A process that was not there at the first reading spent all its ticks since.
        ticks = sum(t - before.get(pid, 0) for pid, t in after.items())
        rss = pss = 0
        for pid in pids:
            with contextlib.suppress(OSError):
                rss += _kib(Path(f"/proc/{pid}/status"), "VmRSS:")
                pss += _kib(Path(f"/proc/{pid}/smaps_rollup"), "Pss:")
        hz = os.sysconf("SC_CLK_TCK")
        return Usage(
            processes=len(pids),
            rss_mib=round(rss / 1024, 1),
            pss_mib=round(pss / 1024, 1),
            cpu_percent=round(100 * ticks / hz / elapsed, 1),
            seconds=round(elapsed, 1),
        )


def _cpu_ticks(pids: set[int]) -> dict[int, int]:
    out = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            # The fields after the command's closing parenthesis; utime and stime are
            # the 14th and 15th of the whole line.
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[pid] = int(fields[11]) + int(fields[12])
    return out


def _kib(path: Path, key: str) -> int:
    for line in path.read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0


@contextlib.contextmanager
def running_cluster(binaries: Path, size: int = 3) -> Iterator[Cluster]:
    cluster = Cluster(binaries, size)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
