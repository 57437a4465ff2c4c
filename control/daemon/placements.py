"""The pods this node runs, as its CNI ADDs and DELs left them, kept in their status.

CNI ADD places a pod on this node: its Topology status names this node, the
netns and the container (cni_handler.py). CNI DEL clears that, and only while
the status still names the deleted container. A valid placement can still
be lost from the status:

- a stale write from another node that the API applies late: that node's ADD
  was already on its way when its DEL came, and the API took it after this
  node's placement (the DEL's clear then follows and empties the status);
- the Topology deleted and created again while its pods run;
- a hand edit of the status.

Every node then tears the pod's links down, although the pod runs here. The
keeper remembers each sandbox this node added and has not deleted, and when
a held pod's status names no container, writes the placement again, on the
condition that the status still names none: it never overwrites a placement
another node wrote meanwhile. A status naming another container is left
alone: either the pod has a newer sandbox elsewhere (this node's DEL will
follow), or a stale one whose own clear will follow and leave the status
empty, and then the keeper acts.

After a restart the keeper holds what the API says runs here (`src_ip` is
this node) and, over that, what its sandbox store recorded (sandbox_store.py):
the store also knows a pod whose placement the API lost while the daemon was
down, and it names the sandbox this node added last.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from meshwire.control.daemon.sandbox_store import Placement, SandboxStore
from meshwire.control.tables.local_placements import PodPlacement
from meshwire.control.tables.topologies import TopologyTable

log = logging.getLogger(__name__)


def write_placement(
    topologies: TopologyTable,
    set_status: Callable[..., None],
    key: str,
    placement: PodPlacement,
    if_container: str | None = None,
) -> None:
    """Record where pod `key` runs (`NOWHERE` for nowhere): in the table at once, so
    links are derived from it now (and kept over older objects from the informer
    until the API has it), and in the API through the status writer (conditional
    with `if_container`, see status_writer.py)."""
    topologies.place(key, placement)
    set_status(key, if_container=if_container, **placement.fields())


class PlacementKeeper:
    def __init__(
        self,
        node_ip: str,
        topologies: TopologyTable,
        set_status: Callable[..., None],
        store: SandboxStore | None = None,
    ) -> None:
        self.node_ip = node_ip
        self.topologies = topologies
        self._set_status = set_status
        self._store = store
        # Pod key -> the sandbox this node added last and has not deleted.
        self._held: dict[str, Placement] = {}
        self._tracker = topologies.track()
        self._seeded = False

    def held(self, key: str) -> Placement | None:
        return self._held.get(key)

    def added(self, key: str, container_id: str, netns: str, network: str = "") -> None:
        """The runtime added a sandbox of pod `key` here, through CNI network `network`;
        recorded before this returns."""
        self._held[key] = Placement(container_id, netns, network)
        if self._store is not None:
            self._store.save(key, self._held[key])

    def deleted(self, key: str, container_id: str) -> None:
        """The runtime deleted a sandbox of pod `key` here (an empty id: whichever it is)."""
        held = self._held.get(key)
        if held is not None and (not container_id or container_id == held.container_id):
            del self._held[key]
            if self._store is not None:
                self._store.remove(key)

    def held_through(self, network: str) -> dict[str, Placement]:
        """The sandboxes held that were added through CNI network `network`, by pod key."""
        return {key: held for key, held in self._held.items() if held.network == network}

    def seed(self) -> None:
        """Once the table has synced, and before the first ADD or DEL is handled: hold
        what the table says runs here, and over it what the store recorded. Later
        calls do nothing."""
        if self._seeded:
            return
        self._seeded = True
        for key in self.topologies.on_node(self.node_ip):
            topology = self.topologies.get(key)
            if topology is not None and topology.status.container_id:
                status = topology.status
                self._held[key] = Placement(status.container_id, status.net_ns)
        if self._store is not None:
            recorded = self._store.load()
            for key, placement in self._held.items():
                if key not in recorded:  # held since before the store existed
                    self._store.save(key, placement)
            self._held.update(recorded)

    def step(self) -> list[str]:
        """Write again the placements of held pods whose status lost them; returns their keys."""
        restored = []
        for key in sorted({change.key for change in self._tracker.next()}):
            held = self._held.get(key)
            topology = self.topologies.get(key)
            if held is None or topology is None or topology.status.container_id:
                continue
            log.warning(
                "pod %s: its status names no container, but container %s runs on this node; "
                "writing its placement again",
                key,
                held.container_id,
            )
            placement = PodPlacement(self.node_ip, held.netns, held.container_id)
            write_placement(self.topologies, self._set_status, key, placement, "")
            restored.append(key)
        return restored

    def start(self) -> list[str]:
        """Seed, then write back what the synced table lost; called by the daemon before
        it derives links for the first time, so a restored pod's links are among the
        initial ones and the first prune spares them."""
        self.seed()
        return self.step()

    async def run(self) -> None:
        await self.topologies.wait_initialized()
        self.start()
        while True:
            await self._tracker.wait()
            self.step()

    def close(self) -> None:
        self._tracker.close()
