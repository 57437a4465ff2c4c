"""Objects of one resource and their history in a SQLite file (stdlib sqlite3, WAL).

The store is the embedded API's etcd: objects keyed (namespace, name) and kept
as JSON, one global resourceVersion that every write bumps, and a history of
events from which watches resume and paged lists read a consistent snapshot.
A cluster-scoped object has no `metadata.namespace` and is keyed ("", name).

Contracts the server and its clients rely on:
- resourceVersion is an integer that only grows, across restarts of the same
  file; it is rendered as a string in objects, as Kubernetes does.
- The server owns `metadata.uid` (uuid4), `creationTimestamp`, `generation`
  (1 on create, +1 on a spec change only) and `resourceVersion`; what a client
  sends for them is ignored.
- A write that changes nothing (same spec, status and user metadata) is not a
  write: no new resourceVersion, no event.
- `create` drops any status and `update` of the main resource keeps the
  stored one; `update(status=True)` changes only the status (a CRD with the
  status subresource).
- History holds every event after the compaction floor. Asking for events or a
  snapshot at a resourceVersion older than the floor raises `Expired` (410).
- Errors are `meshwire.tools.api.errors` exceptions (NotFound, AlreadyExists,
  Conflict, Expired); the listener, if any, is called after each commit with the
  event, in resourceVersion order.

All calls come from one thread (the server's event loop); nothing here locks.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from meshwire.tools.api import errors, jsonio

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"

# Metadata the server sets; a client's values for these are never stored.
SERVER_METADATA = ("uid", "resourceVersion", "creationTimestamp", "generation", "selfLink")

Key = tuple[str, str]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS {p}meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS {p}objects (
    namespace TEXT NOT NULL, name TEXT NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (namespace, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS {p}events (
    rv INTEGER PRIMARY KEY, type TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    body TEXT NOT NULL, prev TEXT);
INSERT OR IGNORE INTO {p}meta VALUES ('rv', 0), ('floor', 0);
"""


@dataclass(frozen=True, slots=True)
class Event:
    type: str
    rv: int
    obj: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list: `items` in (namespace, name) order as of `rv`.

    `last` is the key of the last item when more items follow, else None.
    """

    items: list[dict[str, Any]]
    rv: int
    last: Key | None


Listener = Callable[[Event], None]


def _now() -> datetime:
    return datetime.now(UTC)


def _dumps(obj: dict[str, Any]) -> str:
    return jsonio.dumps(obj)


def _key(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


def _user_view(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without the metadata the server sets: what a no-op check compares."""
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k not in SERVER_METADATA}
    return {**obj, "metadata": meta}


class Store:
    def __init__(
        self,
        path: str,
        *,
        listener: Listener | None = None,
        clock: Callable[[], datetime] = _now,
        table_prefix: str = "",
        resource: errors.Resource = errors.TOPOLOGIES,
    ) -> None:
        """`table_prefix` names this store's tables in the file, so that one file can
        hold a store per resource (each with its own resourceVersion sequence);
        `resource` is what its errors name."""
        self.resource = resource
        self._objects = f"{table_prefix}objects"
        self._events = f"{table_prefix}events"
        self._metatable = f"{table_prefix}meta"
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA.format(p=table_prefix))
        self.listener = listener
        self._clock = clock

    def close(self) -> None:
        self._db.close()

    # -- reads ----------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._meta("rv")

    @property
    def floor(self) -> int:
        """Events after this resourceVersion are kept; older ones are compacted away."""
        return self._meta("floor")

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        row = self._db.execute(
            f"SELECT body FROM {self._objects} WHERE namespace = ? AND name = ?", (namespace, name)
        ).fetchone()
        return None if row is None else dict(jsonio.loads(row[0]))

    def list_page(
        self,
        namespace: str | None = None,
        *,
        limit: int = 0,
        at_rv: int = 0,
        after: Key | None = None,
    ) -> Page:
        """Objects of `namespace` (None: all) with a key after `after`, as of `at_rv`.

        `at_rv` 0 means now. An older `at_rv` is answered from the history (the
        state each changed object had then) and raises `Expired` below the floor.
        `limit` 0 means no limit.
        """
        current = self.resource_version
        rv = at_rv or current
        if rv < self.floor:
            raise errors.Expired(
                f"the list snapshot at resourceVersion {rv} was compacted "
                f"(history starts after {self.floor}); start a new list"
            )
        # The state at rv of every key changed since: the `prev` of its first later event.
        then: dict[Key, str | None] = {}
        for ns, name, prev in self._db.execute(
            f"SELECT namespace, name, prev FROM {self._events} WHERE rv > ? ORDER BY rv", (rv,)
        ):
            then.setdefault((ns, name), prev)
        where, args = self._range(namespace, after)
        sql = (
            f"SELECT namespace, name, body FROM {self._objects} WHERE {where} "
            "ORDER BY namespace, name"
        )
        if limit:
            # Unchanged rows come first in key order; fetching this many leaves
            # at least limit + 1 of them after dropping the changed keys.
            sql += f" LIMIT {limit + len(then) + 1}"
        rows = [
            ((ns, name), body)
            for ns, name, body in self._db.execute(sql, args)
            if (ns, name) not in then
        ]
        rows += [
            (key, body)
            for key, body in then.items()
            if body is not None
            and (namespace is None or key[0] == namespace)
            and (after is None or key > after)
        ]
        rows.sort(key=lambda row: row[0])
        more = bool(limit) and len(rows) > limit
        if more:
            rows = rows[:limit]
        items = [dict(jsonio.loads(body)) for _, body in rows]
        return Page(items=items, rv=rv, last=rows[-1][0] if more else None)

    def events_after(self, rv: int) -> list[Event]:
        """Every event with a resourceVersion above `rv`, oldest first."""
        floor = self.floor
        if rv < floor:
            raise errors.Expired(f"too old resource version: {rv} ({floor})")
        return [
            Event(type_, event_rv, jsonio.loads(body))
            for event_rv, type_, body in self._db.execute(
                f"SELECT rv, type, body FROM {self._events} WHERE rv > ? ORDER BY rv", (rv,)
            )
        ]

    # -- writes ---------------------------------------------------------------

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Stores a new object; `metadata.namespace` and `metadata.name` must be set."""
        namespace, name = _key(obj)
        if self.get(namespace, name) is not None:
            raise errors.already_exists(name, self.resource)
        meta = {k: v for k, v in obj["metadata"].items() if k not in SERVER_METADATA}
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self._clock().strftime("%Y-%m-%dT%H:%M:%SZ")
        meta["generation"] = 1
        new = {k: v for k, v in obj.items() if k != "status"}
        return self._write(ADDED, {**new, "metadata": meta}, None)

    def update(self, obj: dict[str, Any], *, status: bool = False) -> dict[str, Any]:
        """Replaces the object, or only its status with `status=True`.

        A non-empty `metadata.resourceVersion` or `metadata.uid` in `obj` is a
        precondition: a mismatch raises `Conflict`. A missing object raises
        `NotFound` (a Topology is never created by an update).
        """
        namespace, name = _key(obj)
        old = self._current(namespace, name, obj["metadata"])
        if status:
            new = {**old, "status": obj.get("status", {})}
        else:
            meta = {k: v for k, v in obj["metadata"].items() if k not in SERVER_METADATA}
            for field in SERVER_METADATA:
                if field in old["metadata"]:
                    meta[field] = old["metadata"][field]
            new = {**obj, "metadata": meta}
            new.pop("status", None)
            if "status" in old:
                new["status"] = old["status"]
            if new.get("spec") != old.get("spec"):
                meta["generation"] = old["metadata"].get("generation", 0) + 1
        if _user_view(new) == _user_view(old):
            return old
        return self._write(MODIFIED, new, old)

    def delete(
        self, namespace: str, name: str, *, resource_version: str = "", uid: str = ""
    ) -> dict[str, Any]:
        """Deletes the object and returns it as of its deletion.

        `resource_version` and `uid`, when non-empty, are preconditions
        (`Conflict` on a mismatch); a missing object raises `NotFound`.
        """
        old = self._current(namespace, name, {"resourceVersion": resource_version, "uid": uid})
        return self._write(DELETED, old, old)

    def compact(self, keep_after_rv: int) -> None:
        """Drops the events at or below `keep_after_rv` (capped at the current rv)."""
        floor = min(keep_after_rv, self.resource_version)
        if floor <= self.floor:
            return
        self._db.execute("BEGIN IMMEDIATE")
        self._db.execute(f"DELETE FROM {self._events} WHERE rv <= ?", (floor,))
        self._db.execute(f"UPDATE {self._metatable} SET value = ? WHERE key = 'floor'", (floor,))
        self._db.execute("COMMIT")

    # -- internals ------------------------------------------------------------

    def _meta(self, key: str) -> int:
        value: int = self._db.execute(
            f"SELECT value FROM {self._metatable} WHERE key = ?", (key,)
        ).fetchone()[0]
        return value

    def _range(self, namespace: str | None, after: Key | None) -> tuple[str, tuple[str, ...]]:
        if namespace is None and after is None:
            return "1", ()
        if namespace is None and after is not None:
            return "(namespace, name) > (?, ?)", after
        if after is None:
            return "namespace = ?", (str(namespace),)
        return "namespace = ? AND (namespace, name) > (?, ?)", (str(namespace), *after)

    def _current(self, namespace: str, name: str, preconditions: dict[str, Any]) -> dict[str, Any]:
        old = self.get(namespace, name)
        if old is None:
            raise errors.not_found(name, self.resource)
        meta = old["metadata"]
        want_rv = preconditions.get("resourceVersion") or ""
        if want_rv and str(want_rv) != meta["resourceVersion"]:
            raise errors.conflict(name, self.resource)
        want_uid = preconditions.get("uid") or ""
        if want_uid and want_uid != meta["uid"]:
            raise errors.Conflict(
                f"Precondition failed: UID in precondition: {want_uid}, UID in object meta: "
                f"{meta['uid']}",
                name,
                resource=self.resource,
            )
        return old

    def _write(
        self, type_: str, obj: dict[str, Any], prev: dict[str, Any] | None
    ) -> dict[str, Any]:
        namespace, name = _key(obj)
        self._db.execute("BEGIN IMMEDIATE")
        try:
            rv = self._meta("rv") + 1
            obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(rv)}}
            body = _dumps(obj)
            if type_ == DELETED:
                self._db.execute(
                    f"DELETE FROM {self._objects} WHERE namespace = ? AND name = ?",
                    (namespace, name),
                )
            else:
                self._db.execute(
                    f"INSERT OR REPLACE INTO {self._objects} VALUES (?, ?, ?)",
                    (namespace, name, body),
                )
            self._db.execute(
                f"INSERT INTO {self._events} VALUES (?, ?, ?, ?, ?, ?)",
                (rv, type_, namespace, name, body, None if prev is None else _dumps(prev)),
            )
            self._db.execute(f"UPDATE {self._metatable} SET value = ? WHERE key = 'rv'", (rv,))
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        if self.listener is not None:
            self.listener(Event(type_, rv, obj))
        return obj
