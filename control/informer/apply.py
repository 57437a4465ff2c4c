"""Applying what the API said to a `TopologySink`: watch events and full lists.

Pure apart from the sink and a log line: no I/O, no clock. Every function
writes only real changes: an object whose resourceVersion and value equal the
row's is not written again, so a relist of an unchanged cluster leaves the
table's revision where it was.

An object that cannot be read as a Topology (`ModelError`) is logged with its
name and skipped. Its row, if any, keeps the last good version: a bad edit to a
running topology must not tear its links down. A deletion needs only the
object's name, so a DELETED event is applied even for an unreadable object.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Any

from meshwire.control.informer.sink import TopologySink
from meshwire.control.model.topology import ModelError, Topology

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "default"


class Outcome(enum.Enum):
    CHANGED = "changed"
    UNCHANGED = "unchanged"
    UNREADABLE = "unreadable"


def object_key(raw: Any) -> str | None:
    """`ns/name` from an object's metadata, or None when it has no name."""
    meta = raw.get("metadata") if isinstance(raw, dict) else None
    if not isinstance(meta, dict):
        return None
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    namespace = meta.get("namespace") or DEFAULT_NAMESPACE
    return f"{namespace}/{name}"


def decode(raw: Any, previous: Topology | None = None) -> Topology | None:
    """The Topology in `raw`, or None (logged with the object's name) if unreadable;
    `previous`, the row of the same key, lends its links when their source is unchanged."""
    try:
        return Topology.from_dict(raw, default_namespace=DEFAULT_NAMESPACE, previous=previous)
    except ModelError as err:
        log.warning("skipping topology %s: %s", object_key(raw) or "<no name>", err)
        return None


def upsert_if_changed(sink: TopologySink, topology: Topology) -> Outcome:
    old = sink.get(topology.key)
    if old is not None and _same(old, topology):
        return Outcome.UNCHANGED
    sink.upsert(topology)
    return Outcome.CHANGED


def apply_event(sink: TopologySink, event_type: str, raw: Any) -> Outcome:
    """Apply one ADDED, MODIFIED or DELETED watch event.

    Deleting a key the sink does not hold is UNCHANGED, not an error. ADDED and
    MODIFIED are treated alike (both mean "this is the object now").
    """
    if event_type == "DELETED":
        key = object_key(raw)
        if key is None:
            log.warning("skipping DELETED event without metadata.name")
            return Outcome.UNREADABLE
        if sink.get(key) is None:
            return Outcome.UNCHANGED
        sink.delete(key)
        return Outcome.CHANGED
    key = object_key(raw)
    topology = decode(raw, sink.get(key) if key is not None else None)
    if topology is None:
        return Outcome.UNREADABLE
    return upsert_if_changed(sink, topology)


@dataclass
class Snapshot:
    """A full list of the cluster's topologies, as read page by page."""

    topologies: dict[str, Topology] = field(default_factory=dict)
    # Keys that exist on the server but could not be read: not deleted on apply.
    unreadable: set[str] = field(default_factory=set)

    def add(self, raw: Any) -> None:
        topology = decode(raw)
        if topology is not None:
            self.topologies[topology.key] = topology
            return
        key = object_key(raw)
        if key is not None:
            self.unreadable.add(key)


@dataclass(frozen=True, slots=True)
class SnapshotResult:
    upserted: int
    deleted: int


def apply_snapshot(sink: TopologySink, snapshot: Snapshot) -> SnapshotResult:
    """Make the sink hold exactly the snapshot: upsert what changed, delete what vanished.

    A key in the sink that the snapshot neither lists nor marks unreadable was
    deleted while we were not watching; it gets its deletion (a tombstone for
    the table's trackers) here.
    """
    upserted = 0
    for topology in snapshot.topologies.values():
        if upsert_if_changed(sink, topology) is Outcome.CHANGED:
            upserted += 1
    held = sink.keys()
    vanished = [
        key for key in held if key not in snapshot.topologies and key not in snapshot.unreadable
    ]
    for key in vanished:
        sink.delete(key)
    return SnapshotResult(upserted=upserted, deleted=len(vanished))


def _same(old: Topology, new: Topology) -> bool:
    # Equal non-empty resourceVersions mean the same stored object (fast path);
    # otherwise compare values, which also covers servers that send none.
    if old.resource_version and old.resource_version == new.resource_version:
        return True
    return old == new
