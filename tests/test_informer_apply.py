"""What the informer writes for a watch event or a (re)list, without a server.

The log lines are the writes the table saw; a write that is not a change
never happens, so an unchanged cluster leaves the table's revision alone.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from meshwire.control.informer.apply import Outcome, Snapshot, apply_event, apply_snapshot
from meshwire.control.model.emulation import ANNOTATION
from meshwire.control.model.topology import Topology
from tests.informer_helpers import RecordingSink, topology


def stored(name: str, rv: str, *peers: str, src_ip: str = "") -> dict[str, Any]:
    obj = topology(name, *peers, src_ip=src_ip)
    obj["metadata"]["resourceVersion"] = rv
    return obj


def snapshot(*objs: dict[str, Any]) -> Snapshot:
    snap = Snapshot()
    for obj in objs:
        snap.add(obj)
    return snap


def loaded(*objs: dict[str, Any]) -> RecordingSink:
    sink = RecordingSink()
    apply_snapshot(sink, snapshot(*objs))
    sink.take_log()
    return sink


def test_first_list_writes_every_object_once() -> None:
    sink = RecordingSink()
    result = apply_snapshot(sink, snapshot(stored("r1", "5", "r2"), stored("r2", "6", "r1")))
    assert sink.take_log() == ["upsert default/r1", "upsert default/r2"]
    assert (result.upserted, result.deleted) == (2, 0)
    assert sink.table.get("default/r1") is not None


def test_relist_deletes_what_vanished_and_rewrites_only_what_changed() -> None:
    sink = loaded(stored("r1", "5", "r2"), stored("r2", "6", "r1"), stored("r3", "7"))
    revision = sink.table.revision
    tracker = sink.table.track()
    tracker.next()

    result = apply_snapshot(
        sink, snapshot(stored("r1", "5", "r2"), stored("r2", "9", "r1", src_ip="10.0.0.2"))
    )

    assert sink.take_log() == ["upsert default/r2", "delete default/r3"]
    assert (result.upserted, result.deleted) == (1, 1)
    assert sink.table.revision == revision + 2
    changes = {(c.key, c.deleted) for c in tracker.next()}
    assert changes == {("default/r2", False), ("default/r3", True)}


def test_relist_of_an_unchanged_cluster_writes_nothing() -> None:
    objs = (stored("r1", "5", "r2"), stored("r2", "6", "r1"))
    sink = loaded(*objs)
    revision = sink.table.revision
    apply_snapshot(sink, snapshot(*objs))
    assert sink.take_log() == []
    assert sink.table.revision == revision


def test_without_resource_versions_objects_are_compared_by_value() -> None:
    sink = loaded(topology("r1", "r2"), topology("r2", "r1"))
    apply_snapshot(sink, snapshot(topology("r1", "r2"), topology("r2", "r1", "r3")))
    assert sink.take_log() == ["upsert default/r2"]


@pytest.mark.parametrize("event_type", ["ADDED", "MODIFIED"])
def test_an_event_repeating_the_current_object_is_not_a_change(event_type: str) -> None:
    sink = loaded(stored("r1", "5", "r2"))
    assert apply_event(sink, event_type, stored("r1", "5", "r2")) is Outcome.UNCHANGED
    assert apply_event(sink, event_type, stored("r1", "8", "r2", "r3")) is Outcome.CHANGED
    assert sink.take_log() == ["upsert default/r1"]
    row = sink.table.get("default/r1")
    assert row is not None and len(row.links) == 2


def test_deleting_an_object_the_table_never_had_is_not_a_change() -> None:
    sink = loaded(stored("r1", "5"))
    assert apply_event(sink, "DELETED", stored("ghost", "9")) is Outcome.UNCHANGED
    assert apply_event(sink, "DELETED", stored("r1", "10")) is Outcome.CHANGED
    assert sink.take_log() == ["delete default/r1"]


def test_an_unreadable_update_is_skipped_and_the_last_good_version_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = loaded(stored("r1", "5", "r2"))
    bad = stored("r1", "6", "r2")
    bad["spec"]["links"][0]["uid"] = "one"
    with caplog.at_level(logging.WARNING):
        assert apply_event(sink, "MODIFIED", bad) is Outcome.UNREADABLE
    assert "default/r1" in caplog.text and "uid" in caplog.text
    row = sink.table.get("default/r1")
    assert row is not None and row.resource_version == "5"
    assert sink.take_log() == []


def test_a_relist_keeps_an_unreadable_object_instead_of_deleting_it() -> None:
    sink = loaded(stored("r1", "5", "r2"), stored("r2", "6", "r1"))
    bad = stored("r1", "7")
    bad["spec"]["links"] = "r2"
    snap = snapshot(bad, stored("r2", "6", "r1"))
    assert snap.unreadable == {"default/r1"}
    apply_snapshot(sink, snap)
    assert sink.take_log() == []
    assert sorted(sink.table.keys()) == ["default/r1", "default/r2"]


def test_a_deletion_is_applied_even_when_the_object_is_unreadable() -> None:
    sink = loaded(stored("r1", "5"))
    bad = stored("r1", "6")
    bad["status"] = "broken"
    assert apply_event(sink, "DELETED", bad) is Outcome.CHANGED
    assert sink.take_log() == ["delete default/r1"]


def test_objects_without_a_namespace_land_in_default() -> None:
    sink = RecordingSink()
    obj = topology("r1")
    del obj["metadata"]["namespace"]
    apply_event(sink, "ADDED", obj)
    assert sink.table.keys() == ["default/r1"]


def test_a_status_write_keeps_the_rows_links_and_a_changed_link_is_read_again() -> None:
    sink = loaded(stored("r1", "5", "r2", "r3"))
    before = sink.table.get("default/r1")
    assert before is not None
    apply_event(sink, "MODIFIED", stored("r1", "6", "r2", "r3", src_ip="10.0.0.1"))
    after = sink.table.get("default/r1")
    assert after is not None and after.status.src_ip == "10.0.0.1"
    assert after.links is before.links
    changed = stored("r1", "7", "r2", "r3", src_ip="10.0.0.1")
    changed["spec"]["links"][1]["peer_intf"] = "eth9"
    apply_event(sink, "MODIFIED", changed)
    row = sink.table.get("default/r1")
    assert row is not None and row.links is not after.links
    assert row == Topology.from_dict(changed) and row.links[1].peer_intf == "eth9"


def test_a_changed_emulation_annotation_reads_the_links_again() -> None:
    sink = loaded(stored("r1", "5", "r2"))
    down = stored("r1", "6", "r2")
    down["metadata"]["annotations"] = {ANNOTATION: json.dumps({"eth1": {"state": "down"}})}
    apply_event(sink, "MODIFIED", down)
    row = sink.table.get("default/r1")
    assert row is not None and row.links[0].state == "down"
    apply_event(sink, "MODIFIED", stored("r1", "7", "r2"))
    row = sink.table.get("default/r1")
    assert row is not None and row.links[0].state == ""
