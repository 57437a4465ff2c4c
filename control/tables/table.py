"""An in-memory table with revisions, secondary indexes and change tracking.

This is the StateDB model (cilium/statedb) cut to what one asyncio process
needs: every write bumps the table's revision and stamps the row with it; a
`ChangeTracker` hands out each change since it last looked, deletions included,
exactly once; `initialized` says the table's source has delivered its first
full picture.

All methods are called from one event loop thread; nothing here locks.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

V = TypeVar("V")

IndexFunc = Callable[[V], Iterable[str]]


@dataclass(frozen=True, slots=True)
class Row(Generic[V]):
    key: str
    obj: V
    revision: int


@dataclass(frozen=True, slots=True)
class Change(Generic[V]):
    """One change to a key. For a deletion `obj` is the object as it was last."""

    key: str
    obj: V
    revision: int
    deleted: bool


class Table(Generic[V]):
    def __init__(self, name: str, indexes: dict[str, IndexFunc[V]] | None = None) -> None:
        self.name = name
        self._revision = 0
        self._rows: dict[str, Row[V]] = {}
        # Every key ever written, ordered by the revision of its last write, with
        # a tombstone for a deleted key until every tracker has seen it. Invariant:
        # revisions strictly increase from the oldest entry to the newest.
        self._log: OrderedDict[str, Change[V]] = OrderedDict()
        self._tombstones: set[str] = set()
        self._index_funcs: dict[str, IndexFunc[V]] = dict(indexes or {})
        # index name -> index key -> primary keys. Invariant: a primary key is
        # under an index key iff the index function of its current row yields it.
        self._indexes: dict[str, dict[str, set[str]]] = {n: {} for n in self._index_funcs}
        self._trackers: list[ChangeTracker[V]] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._initialized = False
        self._init_waiters: list[asyncio.Future[None]] = []

    # -- reads ----------------------------------------------------------------

    @property
    def revision(self) -> int:
        return self._revision

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[str]:
        """The keys, as a snapshot: writes during iteration do not disturb it."""
        return iter(list(self._rows))

    def __contains__(self, key: str) -> bool:
        return key in self._rows

    def get(self, key: str) -> V | None:
        row = self._rows.get(key)
        return row.obj if row is not None else None

    def row(self, key: str) -> Row[V] | None:
        return self._rows.get(key)

    def keys(self) -> list[str]:
        return list(self._rows)

    def values(self) -> list[V]:
        return [row.obj for row in self._rows.values()]

    def rows(self) -> Iterator[Row[V]]:
        return iter(list(self._rows.values()))

    def lookup(self, index: str, index_key: str) -> set[str]:
        """Primary keys whose row the index maps to `index_key`; O(1), a copy."""
        return set(self._indexes[index].get(index_key, ()))

    def changed_after(self, key: str, revision: int) -> bool:
        """Whether `key` was written or deleted after `revision`; O(1). A deletion is
        known as long as a tracker that has not seen it is open."""
        change = self._log.get(key)
        return change is not None and change.revision > revision

    def index_keys(self, index: str) -> set[str]:
        """The index keys some row maps to; O(index keys), a copy."""
        return set(self._indexes[index])

    # -- writes ---------------------------------------------------------------

    def upsert(self, key: str, obj: V) -> int:
        """Insert or replace the row; returns the new revision."""
        old = self._rows.get(key)
        self._revision += 1
        row = Row(key, obj, self._revision)
        self._rows[key] = row
        self._reindex(key, old.obj if old is not None else None, obj)
        self._record(Change(key, obj, self._revision, deleted=False))
        return self._revision

    def delete(self, key: str) -> V | None:
        """Remove the row and return its object; deleting a missing key is a no-op."""
        old = self._rows.pop(key, None)
        if old is None:
            return None
        self._revision += 1
        self._reindex(key, old.obj, None)
        self._record(Change(key, old.obj, self._revision, deleted=True))
        return old.obj

    # -- initialization -------------------------------------------------------

    @property
    def initialized(self) -> bool:
        return self._initialized

    def mark_initialized(self) -> None:
        self._initialized = True
        for waiter in self._init_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._init_waiters.clear()

    async def wait_initialized(self) -> None:
        if self._initialized:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._init_waiters.append(waiter)
        await waiter

    # -- change tracking ------------------------------------------------------

    def track(self) -> ChangeTracker[V]:
        """A tracker whose first `next()` returns every current row as a change."""
        tracker = ChangeTracker(self)
        self._trackers.append(tracker)
        return tracker

    async def wait_revision_above(self, revision: int) -> None:
        if self._revision > revision:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter

    def _record(self, change: Change[V]) -> None:
        self._log.pop(change.key, None)
        self._log[change.key] = change
        if change.deleted:
            self._tombstones.add(change.key)
        else:
            self._tombstones.discard(change.key)
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()
        if change.deleted and not self._trackers:
            # Nobody can ask for this deletion later: drop the tombstone now.
            del self._log[change.key]
            self._tombstones.discard(change.key)

    def _changes_since(self, revision: int) -> list[Change[V]]:
        out: list[Change[V]] = []
        for change in reversed(self._log.values()):
            if change.revision <= revision:
                break
            out.append(change)
        out.reverse()
        return out

    def _compact(self) -> None:
        """Drop tombstones every tracker has seen."""
        floor = min((t.revision for t in self._trackers), default=self._revision)
        for key in [k for k in self._tombstones if self._log[k].revision <= floor]:
            del self._log[key]
            self._tombstones.discard(key)

    def _untrack(self, tracker: ChangeTracker[V]) -> None:
        if tracker in self._trackers:
            self._trackers.remove(tracker)
            self._compact()

    def _reindex(self, key: str, old: V | None, new: V | None) -> None:
        for name, func in self._index_funcs.items():
            index = self._indexes[name]
            old_keys = set(func(old)) if old is not None else set()
            new_keys = set(func(new)) if new is not None else set()
            for ik in old_keys - new_keys:
                members = index.get(ik)
                if members is not None:
                    members.discard(key)
                    if not members:
                        del index[ik]
            for ik in new_keys - old_keys:
                index.setdefault(ik, set()).add(key)


class ChangeTracker(Generic[V]):
    """Hands out every change to its table since the last call, each once.

    A key changed several times between two calls shows up once, with its
    latest state; a key inserted and deleted between two calls shows up as a
    deletion. Close a tracker you stop using, or tombstones pile up.
    """

    def __init__(self, table: Table[V]) -> None:
        self._table = table
        self.revision = 0

    def next(self) -> list[Change[V]]:
        changes = self._table._changes_since(self.revision)
        self.revision = self._table.revision
        self._table._compact()
        return changes

    async def wait(self) -> None:
        """Return once the table has changes this tracker has not seen."""
        await self._table.wait_revision_above(self.revision)

    def close(self) -> None:
        self._table._untrack(self)
