"""The embedded API's object store, without HTTP: what a write stores, what a
watch or a paged list can read back, and what survives a restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from meshwire.tools.api import errors
from meshwire.tools.api.store import Event, Store
from tests.api_helpers import topology


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(str(tmp_path / "db"))


def rv(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


def test_create_sets_server_fields_and_ignores_the_clients_and_status() -> None:
    store = Store(":memory:")
    sent = topology("r1", "r2")
    sent["metadata"].update(uid="mine", resourceVersion="99", generation=7)
    sent["status"] = {"src_ip": "10.0.0.1"}

    stored = store.create(sent)

    meta = stored["metadata"]
    assert meta["uid"] != "mine" and len(meta["uid"]) == 36
    assert meta["generation"] == 1
    assert meta["resourceVersion"] == "1"
    assert meta["creationTimestamp"].endswith("Z")
    assert stored["spec"] == sent["spec"]
    assert "status" not in stored
    assert store.get("default", "r1") == stored


def test_resource_version_is_global_and_increasing(store: Store) -> None:
    a = store.create(topology("r1", "r2"))
    b = store.create(topology("r2", "r1", namespace="other"))
    c = store.update(topology("r1", "r3"))
    assert rv(a) < rv(b) < rv(c) == store.resource_version


def test_generation_counts_spec_changes_only(store: Store) -> None:
    store.create(topology("r1", "r2"))
    relabelled = topology("r1", "r2")
    relabelled["metadata"]["labels"] = {"lab": "x"}
    assert store.update(relabelled)["metadata"]["generation"] == 1
    with_status = {**topology("r1"), "status": {"src_ip": "10.0.0.1"}}
    assert store.update(with_status, status=True)["metadata"]["generation"] == 1
    assert store.update(topology("r1", "r3"))["metadata"]["generation"] == 2


def test_main_write_keeps_status_and_status_write_keeps_spec(store: Store) -> None:
    store.create(topology("r1", "r2"))
    store.update({**topology("r1", "zzz"), "status": {"src_ip": "10.0.0.1"}}, status=True)
    after_status = store.get("default", "r1")
    assert after_status is not None
    assert after_status["status"] == {"src_ip": "10.0.0.1"}
    assert after_status["spec"] == topology("r1", "r2")["spec"]

    after_spec = store.update({**topology("r1", "r3"), "status": {"src_ip": "forged"}})
    assert after_spec["status"] == {"src_ip": "10.0.0.1"}
    assert after_spec["spec"] == topology("r1", "r3")["spec"]


def test_a_write_that_changes_nothing_is_not_a_write(store: Store) -> None:
    created = store.create(topology("r1", "r2"))
    seen: list[Event] = []
    store.listener = seen.append
    assert store.update(topology("r1", "r2")) == created
    assert store.resource_version == rv(created)
    assert seen == []


def test_stale_resource_version_is_a_conflict(store: Store) -> None:
    created = store.create(topology("r1", "r2"))
    store.update(topology("r1", "r3"))
    stale = topology("r1", "r4")
    stale["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    with pytest.raises(errors.Conflict, match="has been modified"):
        store.update(stale)
    with pytest.raises(errors.Conflict):
        store.delete("default", "r1", resource_version=created["metadata"]["resourceVersion"])
    with pytest.raises(errors.Conflict, match="UID in precondition"):
        store.delete("default", "r1", uid="not-the-uid")


def test_missing_and_existing_names(store: Store) -> None:
    store.create(topology("r1"))
    with pytest.raises(errors.AlreadyExists):
        store.create(topology("r1"))
    with pytest.raises(errors.NotFound):
        store.update(topology("r9"))
    with pytest.raises(errors.NotFound):
        store.delete("default", "r9")
    assert store.get("default", "r9") is None


def test_history_replays_every_change_in_order(store: Store) -> None:
    start = store.resource_version
    store.create(topology("r1", "r2"))
    store.update(topology("r1", "r3"))
    deleted = store.delete("default", "r1")

    events = store.events_after(start)

    assert [(e.type, e.rv) for e in events] == [("ADDED", 1), ("MODIFIED", 2), ("DELETED", 3)]
    assert events[2].obj == deleted
    assert rv(deleted) == 3
    assert store.events_after(2) == events[2:]


def test_history_older_than_the_compaction_floor_is_gone(store: Store) -> None:
    for name in ("r1", "r2", "r3"):
        store.create(topology(name))
    store.compact(2)
    with pytest.raises(errors.Expired, match="too old resource version: 1"):
        store.events_after(1)
    assert [e.rv for e in store.events_after(2)] == [3]


def test_a_paged_list_reads_one_snapshot_while_objects_change(store: Store) -> None:
    for name in ("a", "b", "c", "d"):
        store.create(topology(name))
    first = store.list_page(limit=2)
    assert [o["metadata"]["name"] for o in first.items] == ["a", "b"]
    assert first.last == ("default", "b")

    store.delete("default", "c")
    store.update(topology("d", "x"))
    store.create(topology("bb"))

    rest = store.list_page(limit=5, at_rv=first.rv, after=first.last)
    assert [o["metadata"]["name"] for o in rest.items] == ["c", "d"]
    assert rest.items[1]["spec"]["links"] == []
    assert rest.last is None
    store.compact(store.resource_version)
    with pytest.raises(errors.Expired):
        store.list_page(limit=5, at_rv=first.rv, after=first.last)


def test_list_by_namespace_in_key_order(store: Store) -> None:
    store.create(topology("z", namespace="one"))
    store.create(topology("a", namespace="two"))
    store.create(topology("b", namespace="one"))
    names = [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in store.list_page().items]
    assert names == [("one", "b"), ("one", "z"), ("two", "a")]
    assert [o["metadata"]["name"] for o in store.list_page("one").items] == ["b", "z"]


def test_objects_history_and_resource_version_survive_a_restart(tmp_path: Path) -> None:
    path = str(tmp_path / "db")
    first = Store(path)
    first.create(topology("r1", "r2"))
    first.update(topology("r1", "r3"))
    first.compact(1)
    first.close()

    second = Store(path)
    assert second.resource_version == 2
    assert second.floor == 1
    assert [e.type for e in second.events_after(1)] == ["MODIFIED"]
    assert rv(second.create(topology("r2"))) == 3
