"""Keeps the `links` table equal to what the topologies ask of this node.

A change to pod X's Topology re-derives X and the pods that link to X (the
peer index), and nothing else: in a cluster of thousands of pods, a pod's
restart costs work in proportion to its own links. A full re-derivation of
every local pod runs on each full pass as the safety net.

A change of namespaces' id slots re-derives the local pods of those
namespaces (`rederive_namespaces`).

Rows are written only when they differ, so the link reconciler sees a change
exactly when a link's desired state changed. What derivation found about the
links that get no row (invalid, or waiting for their namespace's id slot) is
written to the links table as each re-derived pod's `Findings`, which tells the
table's health watchers that the pod was derived (tables/health.py). Each
derivation's rows, before and after, go to `rebuilds` (rebuilds.py), which notes
the links a change of emulation moves between the kernel's path and the workers.
"""

from __future__ import annotations

import logging

from meshwire.control.reconcile.derive import (
    NO_CLUSTER,
    Cluster,
    NodeView,
    SlotSource,
    derive_pods,
)
from meshwire.control.reconcile.rebuilds import Rebuilds
from meshwire.control.tables.health import Findings
from meshwire.control.tables.links import POD_INDEX, LinksTable, pods_of
from meshwire.control.tables.topologies import TopologyTable

log = logging.getLogger(__name__)


class DesiredLinks:
    def __init__(
        self,
        topologies: TopologyTable,
        links: LinksTable,
        node: NodeView,
        slots: SlotSource,
        rebuilds: Rebuilds | None = None,
        cluster: Cluster = NO_CLUSTER,
    ) -> None:
        """`cluster`: what the cluster says of its nodes (derive.py); a change of its
        answers is followed by `rederive_all`."""
        self.topologies = topologies
        self.links = links
        self.node = node
        self.slots = slots
        self.cluster = cluster
        self.rebuilds = rebuilds if rebuilds is not None else Rebuilds()
        self._tracker = topologies.track()

    def pending(self) -> bool:
        return self.topologies.revision > self._tracker.revision

    def owes(self, pod: str) -> bool:
        """Whether derivation may still change the pod's rows: a change to the pod's
        Topology, or to one its links lead to, is not applied yet, or a link of the
        pod waits for its namespace's slot. The pod's next derivation tells the links
        table's health watchers of the pod."""
        if self.links.findings(pod).waiting_for_slot:
            return True
        seen = self._tracker.revision
        sources = {pod, *self.topologies.peers(pod)}
        return any(self.topologies.changed_after(key, seen) for key in sources)

    async def wait(self) -> None:
        await self._tracker.wait()

    def step(self) -> set[str]:
        """Apply every topology change since the last step; returns the pods re-derived."""
        changed = {change.key for change in self._tracker.next()}
        affected = set(changed)
        for key in changed:
            affected |= self.topologies.dependents(key)
        if affected:
            self.rederive(affected)
        return affected

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
        return pods

    def rederive(self, pods: set[str]) -> None:
        """Derive `pods` again: their rows written where they differ, then their findings."""
        derived = derive_pods(self.topologies, pods, self.node, self.slots, self.cluster)
        stale: set[str] = set()
        for pod in pods:
            stale |= self.links.lookup(POD_INDEX, pod)
        before = [row for key in stale if (row := self.links.get(key)) is not None]
        self.rebuilds.observe(pods, before, derived.rows.values())
        for key, row in derived.rows.items():
            if self.links.get(key) != row:
                self.links.upsert(key, row)
        for key in sorted(stale - derived.rows.keys()):
            log.debug("link %s no longer wanted", key)
            self.links.delete(key)
        self.links.set_findings(
            {
                pod: Findings(tuple(derived.problems.get(pod, ())), pod in derived.waiting_for_slot)
                for pod in pods
            }
        )

    def close(self) -> None:
        self._tracker.close()
