"""Keeps the `links` table equal to what the topologies ask of this node.

A change to pod X's Topology re-derives X and the pods that link to X (the
peer index), and nothing else: in a cluster of thousands of pods, a pod's
restart costs work in proportion to its own links. A full re-derivation of
every local pod runs on each full pass as the safety net.

A change of namespaces' id slots re-derives the local pods of those
namespaces (`rederive_namespaces`).

Rows are written only when they differ, so the link reconciler sees a change
exactly when a link's desired state changed. Each derivation's rows, before and
after, go to `rebuilds` (rebuilds.py), which notes the links a change of
emulation moves between the kernel's path and the workers.
"""

from __future__ import annotations

import asyncio
import logging

from meshwire.control.reconcile.derive import NodeView, SlotSource, derive_pods
from meshwire.control.reconcile.rebuilds import Rebuilds
from meshwire.control.tables.links import POD_INDEX, LinkRow, pods_of
from meshwire.control.tables.table import Table
from meshwire.control.tables.topologies import TopologyTable

log = logging.getLogger(__name__)


class DesiredLinks:
    def __init__(
        self,
        topologies: TopologyTable,
        links: Table[LinkRow],
        node: NodeView,
        slots: SlotSource,
        rebuilds: Rebuilds | None = None,
    ) -> None:
        self.topologies = topologies
        self.links = links
        self.node = node
        self.slots = slots
        # Pod key -> the problems of its links that derivation found (invalid
        # links, ends that disagree). Only pods with problems are present.
        self.problems: dict[str, list[str]] = {}
        # Pod keys with a link that is due but waits for its namespace's id slot.
        self.waiting_for_slot: set[str] = set()
        self.rebuilds = rebuilds if rebuilds is not None else Rebuilds()
        self._tracker = topologies.track()
        # Callers of `stepped()` waiting for the next step, resolved by it.
        self._steppers: list[asyncio.Future[None]] = []

    def pending(self) -> bool:
        return self.topologies.revision > self._tracker.revision

    def owes(self, pod: str) -> bool:
        """Whether derivation may still change the pod's rows: changes are pending, or a
        link of the pod waits for its namespace's slot."""
        return self.pending() or pod in self.waiting_for_slot

    async def wait(self) -> None:
        await self._tracker.wait()

    def stepped(self) -> asyncio.Future[None]:
        """A future resolved once derivation next ran (a `step`, or pods re-derived
        because their slots changed): how a caller that saw `pending()`, or a pod
        waiting for its slot, learns without polling that the changes were applied.
        It counts from this call on; cancelling it leaves nothing."""
        step: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._steppers.append(step)
        step.add_done_callback(self._forget_stepper)
        return step

    def _forget_stepper(self, step: asyncio.Future[None]) -> None:
        if step in self._steppers:
            self._steppers.remove(step)

    def step(self) -> set[str]:
        """Apply every topology change since the last step; returns the pods re-derived."""
        changed = {change.key for change in self._tracker.next()}
        affected = set(changed)
        for key in changed:
            affected |= self.topologies.dependents(key)
        if affected:
            self.rederive(affected)
        self._wake_steppers()
        return affected

    def _wake_steppers(self) -> None:
        steppers, self._steppers = self._steppers, []
        for step in steppers:
            if not step.done():
                step.set_result(None)

    def rederive_all(self) -> None:
        """Re-derive every pod this node has rows for or that claims this node."""
        pods = set(self.topologies.on_node(self.node.node_ip))
        for row in self.links.values():
            pods |= set(pods_of(row))
        self.rederive(pods)

    def rederive_namespaces(self, namespaces: set[str]) -> set[str]:
        """Re-derive this node's pods in `namespaces` (their slots changed); returns them."""
        pods = {
            key
            for key in self.topologies.on_node(self.node.node_ip)
            if key.partition("/")[0] in namespaces
        }
        pods |= {
            pod
            for row in self.links.values()
            if row.namespace in namespaces
            for pod in pods_of(row)
        }
        if pods:
            self.rederive(pods)
        self._wake_steppers()
        return pods

    def rederive(self, pods: set[str]) -> None:
        derived = derive_pods(self.topologies, pods, self.node, self.slots)
        stale: set[str] = set()
        for pod in pods:
            stale |= self.links.lookup(POD_INDEX, pod)
            problems = derived.problems.get(pod)
            if problems:
                self.problems[pod] = problems
            else:
                self.problems.pop(pod, None)
            if pod in derived.waiting_for_slot:
                self.waiting_for_slot.add(pod)
            else:
                self.waiting_for_slot.discard(pod)
        before = [row for key in stale if (row := self.links.get(key)) is not None]
        self.rebuilds.observe(pods, before, derived.rows.values())
        for key, row in derived.rows.items():
            if self.links.get(key) != row:
                self.links.upsert(key, row)
        for key in sorted(stale - derived.rows.keys()):
            log.debug("link %s no longer wanted", key)
            self.links.delete(key)

    def close(self) -> None:
        self._tracker.close()
