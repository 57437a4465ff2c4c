"""Where the informer writes: the `TopologySink` contract, and an adapter for a plain `Table`.

The informer is the only writer of its sink and calls it from one event loop.
It calls `upsert` only for an object that changed (new, or a different value
than `get` returns) and `delete` only for a key that `keys` listed or that a
watch reported deleted, so every call is a real change: a revisioned table
bumps its revision exactly once per change the cluster made.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from meshwire.control.model.topology import Topology
from meshwire.control.tables.table import Table


class TopologySink(Protocol):
    def upsert(self, topology: Topology) -> object:
        """Insert or replace the row under `topology.key`."""

    def delete(self, key: str) -> object:
        """Remove the row under `key` (`ns/name`); a missing key is a no-op."""

    def keys(self) -> Iterable[str]:
        """Every key the sink holds."""

    def get(self, key: str) -> Topology | None:
        """The row under `key`, or None."""

    def mark_initialized(self) -> None:
        """The first full list has been applied; called once per informer run."""


class TableSink:
    """A `TopologySink` over a `Table[Topology]` keyed by `Topology.key`."""

    def __init__(self, table: Table[Topology]) -> None:
        self.table = table

    def upsert(self, topology: Topology) -> int:
        return self.table.upsert(topology.key, topology)

    def delete(self, key: str) -> Topology | None:
        return self.table.delete(key)

    def keys(self) -> list[str]:
        return self.table.keys()

    def get(self, key: str) -> Topology | None:
        return self.table.get(key)

    def mark_initialized(self) -> None:
        self.table.mark_initialized()
