"""Each pod's `plumbing_error`, published when its links' health changes.

A pod's plumbing_error is its `pod_errors` joined by "; ": what derivation found
wrong with its links, the errors of its rows, and its wires' handshake problems,
all read from the links table's health (tables/health.py); CNI ADD and CHECK say
the same list. It is recomputed for the pods a health write touches when the
write may change their messages (a health watcher on the links table: a row
write that neither is nor replaces an error, nor changes a handshake problem,
cannot change a message, and a 1,500-link pod would otherwise be recomputed for
each of its rows; every derivation of a pod may). Marks are taken on the event
loop by the `run` task, all those made before it wakes in one pass: there is no
timer. A message that differs from the pod's status as last read from the API is
handed to the status writer, which coalesces and rate-limits its writes. Only
the pods this node holds (`status.src_ip`) are written.

The same pass writes `link_rebuilds` (reconcile/rebuilds.py) for the pods whose
note derivation changed: a change of emulation rebuilds a link only through a
derivation, which marks its pods.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from meshwire.control.reconcile.rebuilds import Rebuilds
from meshwire.control.tables.health import State
from meshwire.control.tables.links import POD_INDEX, LinksTable
from meshwire.control.tables.topologies import TopologyTable


def pod_errors(links: LinksTable, pod: str) -> list[str]:
    """Every error of a pod's links, in one order: derivation's problems, then the
    errors of its rows, then their handshake problems, each in row key order."""
    keys = sorted(links.lookup(POD_INDEX, pod))
    rows = [(row, links.health(key)) for key in keys if (row := links.get(key)) is not None]
    failed = [health.message for _, health in rows if health.state is State.ERROR]
    handshakes = [
        f"link {row.namespace}/{row.uid}: {health.handshake}"
        for row, health in rows
        if health.handshake
    ]
    return [*links.findings(pod).problems, *failed, *handshakes]


class PlumbingErrors:
    def __init__(
        self,
        node_ip: str,
        topologies: TopologyTable,
        links: LinksTable,
        rebuilds: Rebuilds,
        write: Callable[..., None],
    ) -> None:
        """`write(pod, plumbing_error=message)` (or `link_rebuilds=`) hands a message to
        the status writer."""
        self.node_ip = node_ip
        self.topologies = topologies
        self.links = links
        self.rebuilds = rebuilds
        self._write = write
        # Pods (`ns/pod`) to recompute; `_marked` is set while there are any.
        self._dirty: set[str] = set()
        self._marked = asyncio.Event()
        self._unwatch = links.watch_health(self._health_written)

    def _health_written(self, pods: Iterable[str], errors: bool) -> None:
        if errors:
            self._dirty.update(pods)
            self._marked.set()

    async def run(self) -> None:
        """Publish the dirty pods whenever there are some, until cancelled."""
        while True:
            await self._marked.wait()
            self._marked.clear()
            dirty, self._dirty = self._dirty, set()
            for pod in sorted(dirty):
                self._publish(pod)
            for pod in sorted(self.rebuilds.take_changed()):
                if self._here(pod):
                    self._write(pod, link_rebuilds=self.rebuilds.note(pod))

    def _here(self, pod: str) -> bool:
        topology = self.topologies.get(pod)
        return topology is not None and topology.status.src_ip == self.node_ip

    def _publish(self, pod: str) -> None:
        topology = self.topologies.get(pod)
        if topology is None or topology.status.src_ip != self.node_ip:
            return
        message = "; ".join(pod_errors(self.links, pod))
        if message != topology.status.plumbing_error:
            self._write(pod, plumbing_error=message)

    def close(self) -> None:
        """Stop watching the links table's health."""
        self._unwatch()
