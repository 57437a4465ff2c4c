"""The `topologies` table: every Topology object in the cluster, keyed `ns/name`.

Fed by the informer; read by the link derivation. Two secondary indexes keep
the lookups the reconcilers need O(1):

- `peer`: `ns/peer_pod` -> the pods whose links point at that pod (the
  inverted index of KNE #743), so a change to pod X touches only X and its
  dependents;
- `node`: `status.src_ip` -> the pods on that node;
- `namespace`: a namespace -> its pods, so the namespaces holding a Topology
  are known without a pass over every row.

A placement this node wrote (`place`) is shown over the informer's older
objects until the API has it (local_placements.py); the status writer says
when a write landed or was dropped (`status_landed`, `status_dropped`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from meshwire.control.model.topology import Topology
from meshwire.control.tables.local_placements import LocalPlacement, PodPlacement, StatusRead
from meshwire.control.tables.table import ChangeTracker, Table

PEER_INDEX = "peer"
NODE_INDEX = "node"
NAMESPACE_INDEX = "namespace"

log = logging.getLogger(__name__)


def _peers(topology: Topology) -> Iterable[str]:
    return {f"{topology.namespace}/{link.peer_pod}" for link in topology.links if not link.to_host}


def _node(topology: Topology) -> Iterable[str]:
    return (topology.status.src_ip,) if topology.status.src_ip else ()


def _namespace(topology: Topology) -> Iterable[str]:
    return (topology.namespace,)


class TopologyTable:
    """The table, with the informer's sink interface (`upsert(topology)`, `delete(key)`)."""

    def __init__(self) -> None:
        self.table: Table[Topology] = Table(
            "topologies",
            indexes={PEER_INDEX: _peers, NODE_INDEX: _node, NAMESPACE_INDEX: _namespace},
        )
        # Pod key -> the placement this node wrote and the API may not have yet.
        # Invariant: a key is here iff it is in _delivered, and its row is
        # _delivered[key] with the placement laid over it.
        self._local: dict[str, LocalPlacement] = {}
        # Pod key -> the object as the informer last delivered it (or as the
        # table held it when the placement was written).
        self._delivered: dict[str, Topology] = {}

    @property
    def revision(self) -> int:
        return self.table.revision

    @property
    def initialized(self) -> bool:
        return self.table.initialized

    def __len__(self) -> int:
        return len(self.table)

    def get(self, key: str) -> Topology | None:
        return self.table.get(key)

    def keys(self) -> list[str]:
        return self.table.keys()

    def upsert(self, topology: Topology) -> None:
        """Store the object as the API has it, under any placement written here that
        it does not include yet; an identical row is not a change (no revision bump)."""
        key = topology.key
        local = self._local.get(key)
        if local is not None:
            if local.caught_up(topology):
                self._forget(key)
            else:
                self._delivered[key] = topology
                if PodPlacement.of_status(topology.status) != local.placement:
                    log.debug(
                        "topology %s: resourceVersion %s predates this node's placement "
                        "(container %r), which is kept",
                        key,
                        topology.resource_version,
                        local.placement.container_id,
                    )
                topology = local.placement.over(topology)
        self._store(topology)

    def delete(self, key: str) -> None:
        self._forget(key)
        self.table.delete(key)

    def place(self, key: str, placement: PodPlacement) -> None:
        """This node wrote `placement` into pod `key`'s status: the row shows it at
        once, and keeps it over older objects from the informer. A key the table
        does not hold is a no-op (the write will find the object gone)."""
        current = self.table.get(key)
        if current is None:
            return
        delivered = self._delivered.setdefault(key, current)
        self._local[key] = LocalPlacement(placement)
        self._store(placement.over(delivered))

    def status_landed(self, key: str, fields: Mapping[str, str], resource_version: str) -> None:
        """The status writer wrote `fields` for `key`; the object is at `resource_version`."""
        local = self._local.get(key)
        if local is None or PodPlacement.of_fields(fields) != local.placement:
            return
        local.landed_at = resource_version
        delivered = self._delivered[key]
        if local.caught_up(delivered):
            self._forget(key)
            self._store(delivered)

    def status_dropped(
        self, key: str, fields: Mapping[str, str], read: StatusRead | None = None
    ) -> None:
        """The status writer dropped `fields` for `key`: the API's object stands, as
        the informer delivered it, or as `read` by a condition that failed.

        A read's placement is shown until the informer delivers the object at the
        read's version.
        The informer may lag behind (it reconnects after an outage), and the
        object it last delivered can name the very sandbox the dropped write
        meant to replace: shown again, it moved the links back there, and the
        placement keeper cleared it over and over.
        """
        local = self._local.get(key)
        if local is None or PodPlacement.of_fields(fields) != local.placement:
            return
        delivered = self._delivered[key]
        seen = PodPlacement.of_fields(read.fields) if read is not None else None
        if read is not None and seen is not None and read.resource_version:
            shown = LocalPlacement(seen, landed_at=read.resource_version)
            if not shown.caught_up(delivered):
                self._local[key] = shown
                self._store(seen.over(delivered))
                return
        self._forget(key)
        self._store(delivered)

    def _store(self, topology: Topology) -> None:
        if self.table.get(topology.key) != topology:
            self.table.upsert(topology.key, topology)

    def _forget(self, key: str) -> None:
        self._local.pop(key, None)
        self._delivered.pop(key, None)

    def mark_initialized(self) -> None:
        self.table.mark_initialized()

    async def wait_initialized(self) -> None:
        await self.table.wait_initialized()

    def track(self) -> ChangeTracker[Topology]:
        return self.table.track()

    def dependents(self, key: str) -> set[str]:
        """Keys of the pods with a link to pod `key` (`ns/name`), present or not."""
        return self.table.lookup(PEER_INDEX, key)

    def peers(self, key: str) -> set[str]:
        """Keys of the pods pod `key`'s links lead to (the host aside); none without it."""
        topology = self.get(key)
        return set(_peers(topology)) if topology is not None else set()

    def changed_after(self, key: str, revision: int) -> bool:
        """Whether pod `key` was written or deleted after `revision` (see `Table`)."""
        return self.table.changed_after(key, revision)

    def namespaces(self) -> set[str]:
        """The namespaces that hold at least one Topology."""
        return self.table.index_keys(NAMESPACE_INDEX)

    def on_node(self, node_ip: str) -> set[str]:
        """Keys of the pods whose `status.src_ip` is `node_ip`."""
        return self.table.lookup(NODE_INDEX, node_ip)
