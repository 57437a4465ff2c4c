"""The `topologies` table: every Topology object in the cluster, keyed `ns/name`.

Fed by the informer; read by the link derivation. Two secondary indexes keep
the lookups the reconcilers need O(1):

- `peer`: `ns/peer_pod` -> the pods whose links point at that pod (the
  inverted index of KNE #743), so a change to pod X touches only X and its
  dependents;
- `node`: `status.src_ip` -> the pods on that node.
"""

from __future__ import annotations

from collections.abc import Iterable

from meshwire.control.model.topology import Topology
from meshwire.control.tables.table import ChangeTracker, Table

PEER_INDEX = "peer"
NODE_INDEX = "node"


def _peers(topology: Topology) -> Iterable[str]:
    return {f"{topology.namespace}/{link.peer_pod}" for link in topology.links if not link.to_host}


def _node(topology: Topology) -> Iterable[str]:
    return (topology.status.src_ip,) if topology.status.src_ip else ()


class TopologyTable:
    """The table, with the informer's sink interface (`upsert(topology)`, `delete(key)`)."""

    def __init__(self) -> None:
        self.table: Table[Topology] = Table(
            "topologies", indexes={PEER_INDEX: _peers, NODE_INDEX: _node}
        )

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
        """Store the object; an identical object is not a change (no revision bump)."""
        if self.table.get(topology.key) == topology:
            return
        self.table.upsert(topology.key, topology)

    def delete(self, key: str) -> None:
        self.table.delete(key)

    def mark_initialized(self) -> None:
        self.table.mark_initialized()

    async def wait_initialized(self) -> None:
        await self.table.wait_initialized()

    def track(self) -> ChangeTracker[Topology]:
        return self.table.track()

    def dependents(self, key: str) -> set[str]:
        """Keys of the pods with a link to pod `key` (`ns/name`), present or not."""
        return self.table.lookup(PEER_INDEX, key)

    def on_node(self, node_ip: str) -> set[str]:
        """Keys of the pods whose `status.src_ip` is `node_ip`."""
        return self.table.lookup(NODE_INDEX, node_ip)
