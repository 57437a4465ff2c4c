"""Each pod's `plumbing_error`, published when what it is made of changes.

A pod's plumbing_error is its `pod_errors` (derivation's problems, the errors in
its link rows' statuses, its wires' failed handshakes) joined by "; ", the list
CNI CHECK answers with. It is recomputed for the pods marked dirty: the pods a
row touches whenever the reconciler writes an error into that row's status or
replaces one (a status watcher on the links table: a write that neither is nor
replaces an error cannot change a message, and a 1,500-link pod would otherwise
be recomputed for each of its rows), and the pods derivation hands to `mark`. Marks are taken
on the event loop by the `run` task, all those made before it wakes in one
pass: there is no timer. A message that differs from the pod's status as last
read from the API is handed to the status writer, which coalesces and
rate-limits its writes. Only the pods this node holds (`status.src_ip`) are
written.

The same pass writes `link_rebuilds` (reconcile/rebuilds.py) for the pods whose
note derivation changed: a change of emulation rebuilds a link only through a
derivation, whose pods are marked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from meshwire.control.daemon.cni_handler import pod_errors
from meshwire.control.reconcile.desired import DesiredLinks
from meshwire.control.tables.links import (
    POD_INDEX,
    LinkRow,
    LinksTable,
    LinkStatus,
    State,
    pods_of,
)
from meshwire.control.tables.topologies import TopologyTable


class PlumbingErrors:
    def __init__(
        self,
        node_ip: str,
        topologies: TopologyTable,
        links: LinksTable,
        desired: DesiredLinks,
        write: Callable[..., None],
        wire_problems: Callable[[set[str]], list[str]],
    ) -> None:
        """`write(pod, plumbing_error=message)` (or `link_rebuilds=`) hands a message to
        the status writer."""
        self.node_ip = node_ip
        self.topologies = topologies
        self.links = links
        self.desired = desired
        self._write = write
        self._wire_problems = wire_problems
        # Pods (`ns/pod`) to recompute; `_marked` is set while there are any.
        self._dirty: set[str] = set()
        self._marked = asyncio.Event()
        self._unwatch = links.watch_status(self._status_written)

    def mark(self, pods: Iterable[str]) -> None:
        """Recompute these pods' plumbing_error at the `run` task's next pass."""
        self._dirty.update(pods)
        if self._dirty:
            self._marked.set()

    def _status_written(self, row: LinkRow, before: LinkStatus, after: LinkStatus) -> None:
        if State.ERROR in (before.state, after.state):
            self.mark(pods_of(row))

    async def run(self) -> None:
        """Publish the dirty pods whenever there are some, until cancelled."""
        while True:
            await self._marked.wait()
            self._marked.clear()
            dirty, self._dirty = self._dirty, set()
            for pod in sorted(dirty):
                self._publish(pod)
            for pod in sorted(self.desired.rebuilds.take_changed()):
                if self._here(pod):
                    self._write(pod, link_rebuilds=self.desired.rebuilds.note(pod))

    def _here(self, pod: str) -> bool:
        topology = self.topologies.get(pod)
        return topology is not None and topology.status.src_ip == self.node_ip

    def _publish(self, pod: str) -> None:
        topology = self.topologies.get(pod)
        if topology is None or topology.status.src_ip != self.node_ip:
            return
        keys = self.links.lookup(POD_INDEX, pod)
        message = "; ".join(pod_errors(pod, self.desired, self.links, keys, self._wire_problems))
        if message != topology.status.plumbing_error:
            self._write(pod, plumbing_error=message)

    def close(self) -> None:
        """Stop watching the links table's statuses."""
        self._unwatch()
