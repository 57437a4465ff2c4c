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

Every node then tears the pod's links down, although the pod runs here. And
a status can keep naming this node for a sandbox that is gone: a late write
of this node's own, or a clear that waited out an API outage behind an ADD
that never landed (the clear's condition names the ADD's container, which
the API never saw).

The keeper remembers each sandbox this node added and has not deleted, and
makes every status that names this node or no node say what this node holds:

- held, and the status names no container, or another container on this
  node: the held placement is written;
- not held, and the status names a container on this node: the placement is
  cleared.

Each write is conditional on the status the keeper saw (`if_container`): it
never overwrites what another node wrote meanwhile. A status naming another
node is left alone: either the pod has a newer sandbox there (this node's
DEL will follow), or a stale write of that node's, which that node clears,
and then the keeper acts.

After a restart the keeper holds what the API says runs here (`src_ip` is
this node) and, over that, what its sandbox store recorded (sandbox_store.py):
the store also knows a pod whose placement the API lost while the daemon was
down, and it names the sandbox this node added last. A sandbox whose DEL was
answered before the API had its clear is not held, even if the API still
names it: the keeper then clears it.

The keeper is also the daemon's authority on namespaces (netns_guard.py): a
namespace is handed to the daemon while a sandbox held from an ADD names it
and it still has the identity the ADD found. A sandbox held from the API
alone vouches for none: a status is not proof that this node's CNI put a
pod there. A namespace stays released, where the daemon may still clear
what it built, from the DEL (or the next ADD of its pod) until its identity
changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from meshwire.control.daemon.sandbox_store import Sandbox, SandboxStore
from meshwire.control.links.netns import identity_of
from meshwire.control.model.topology import TopologyStatus
from meshwire.control.tables.local_placements import NOWHERE, PodPlacement
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
        self._held: dict[str, Sandbox] = {}
        # Netns path -> identity, of sandboxes no longer held whose links may still
        # be cleared; an entry goes once the path no longer has that identity.
        self._released: dict[str, tuple[int, int]] = {}
        # Netns path -> identity, of the held sandboxes that have one (`handed`).
        self._handed: dict[str, tuple[int, int]] = {}
        self._tracker = topologies.track()
        self._seeded = False

    def held(self, key: str) -> Sandbox | None:
        return self._held.get(key)

    def added(self, key: str, container_id: str, netns: str, network: str = "") -> bool:
        """The runtime added a sandbox of pod `key` here, through CNI network `network`.
        Returns whether it is recorded in the sandbox store before this returns: then a
        restarted daemon still writes its placement, should the API not have it yet."""
        self._hold(key, Sandbox(container_id, netns, network, identity_of(netns)))
        return self._store is not None and self._store.save(key, self._held[key])

    def deleted(self, key: str, container_id: str) -> None:
        """The runtime deleted a sandbox of pod `key` here (an empty id: whichever it is)."""
        held = self._held.get(key)
        if held is not None and (not container_id or container_id == held.container_id):
            del self._held[key]
            self._release(held)
            if self._store is not None:
                self._store.remove(key)

    def deleted_late(self, key: str, container_id: str) -> bool:
        """The DEL of sandbox `container_id` of pod `key` is answered before its clear is in
        the API: record that, for a restarted daemon to clear what the API still says.
        Whether it is on disk."""
        return self._store is not None and self._store.mark_deleted(key, container_id)

    def handed(self, netns: str) -> bool:
        """Whether a sandbox this node's CNI ADD put here is in `netns`, the very
        namespace the ADD found at that path: links may be built in it."""
        recorded = self._handed.get(netns)
        return recorded is not None and identity_of(netns) == recorded

    def was_handed(self, netns: str) -> bool:
        """Whether `netns` is handed, or was and is still the same namespace: what the
        daemon built in it may be cleared."""
        if self.handed(netns):
            return True
        released = self._released.get(netns)
        if released is None:
            return False
        if identity_of(netns) == released:
            return True
        del self._released[netns]
        return False

    def _hold(self, key: str, sandbox: Sandbox) -> None:
        self._release(self._held.get(key))
        self._held[key] = sandbox
        if sandbox.identity is not None:
            self._handed[sandbox.netns] = sandbox.identity
            self._released.pop(sandbox.netns, None)

    def _release(self, held: Sandbox | None) -> None:
        if held is not None and held.identity is not None:
            if self._handed.get(held.netns) == held.identity:
                del self._handed[held.netns]
            # Namespaces released earlier and gone since are forgotten here: the map
            # holds only those a runtime has not torn down yet.
            for netns, identity in list(self._released.items()):
                if identity_of(netns) != identity:
                    del self._released[netns]
            self._released[held.netns] = held.identity

    def held_through(self, network: str) -> dict[str, Sandbox]:
        """The sandboxes held that were added through CNI network `network`, by pod key."""
        return {key: held for key, held in self._held.items() if held.network == network}

    def seed(self) -> None:
        """Once the table has synced, and before the first ADD or DEL is handled: hold
        what the table says runs here, and over it what the store recorded. Later
        calls do nothing."""
        if self._seeded:
            return
        self._seeded = True
        deleted = self._store.load_deleted() if self._store is not None else set()
        named = set()
        for key in self.topologies.on_node(self.node_ip):
            topology = self.topologies.get(key)
            if topology is not None and topology.status.container_id:
                status = topology.status
                named.add((key, status.container_id))
                if (key, status.container_id) not in deleted:
                    self._held[key] = Sandbox(status.container_id, status.net_ns)
        if self._store is not None:
            for key, container_id in deleted - named:  # the API has the clear
                self._store.forget_deleted(key, container_id)
            recorded = self._store.load()
            for key, sandbox in self._held.items():
                if key not in recorded:  # held since before the store existed
                    self._store.save(key, sandbox)
            for key, sandbox in recorded.items():
                self._hold(key, sandbox)

    def step(self) -> list[str]:
        """Make the statuses that changed say what this node holds (see the module doc);
        returns the keys written."""
        written = []
        for key in sorted({change.key for change in self._tracker.next()}):
            topology = self.topologies.get(key)
            if topology is not None and self._correct(key, topology.status):
                written.append(key)
        return written

    def _correct(self, key: str, status: TopologyStatus) -> bool:
        """Write the placement this node holds for pod `key` if `status` says otherwise
        and names no other node; whether it wrote."""
        if status.container_id and status.src_ip != self.node_ip:
            return False
        held = self._held.get(key)
        if held is None:
            if not status.container_id:
                return False
            log.warning(
                "pod %s: its status names container %s on this node, which runs no sandbox "
                "of it; clearing its placement",
                key,
                status.container_id,
            )
            placement = NOWHERE
        else:
            if held.container_id == status.container_id:
                return False
            log.warning(
                "pod %s: its status names %s, but container %s runs on this node; "
                "writing its placement again",
                key,
                f"container {status.container_id}" if status.container_id else "no container",
                held.container_id,
            )
            placement = PodPlacement(self.node_ip, held.netns, held.container_id)
        write_placement(self.topologies, self._set_status, key, placement, status.container_id)
        return True

    def start(self) -> list[str]:
        """Seed, then correct what the synced table says (`step`); called by the daemon
        before it derives links for the first time, so a restored pod's links are among
        the initial ones and the first prune spares them, and by the CNI handler before
        each request, so a request reads the corrected placement."""
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
