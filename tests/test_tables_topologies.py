"""The topologies table: revisions, change tracking and the peer/node/namespace indexes."""

from __future__ import annotations

from derive_helpers import NODE_A, NODE_B, pair, pod

from meshwire.control.tables.topologies import TopologyTable


def test_a_pod_is_found_by_the_pods_that_link_to_it() -> None:
    table = TopologyTable()
    r1_r2, r2_r1 = pair(1, "r1", "r2")
    r3_r2, r2_r3 = pair(2, "r3", "r2", b_intf="eth2")
    table.upsert(pod("r1", r1_r2))
    table.upsert(pod("r2", r2_r1, r2_r3))
    table.upsert(pod("r3", r3_r2))
    assert table.dependents("default/r2") == {"default/r1", "default/r3"}
    assert table.dependents("default/r1") == {"default/r2"}
    assert table.dependents("default/nobody") == set()


def test_dependents_follow_a_link_removed_from_a_running_topology() -> None:
    table = TopologyTable()
    r1_r2, _ = pair(1, "r1", "r2")
    table.upsert(pod("r1", r1_r2))
    table.upsert(pod("r1"))
    assert table.dependents("default/r2") == set()


def test_pods_are_found_by_node_and_move_with_their_src_ip() -> None:
    table = TopologyTable()
    table.upsert(pod("r1", node=NODE_A))
    table.upsert(pod("r2", node=NODE_A))
    assert table.on_node(NODE_A) == {"default/r1", "default/r2"}
    table.upsert(pod("r2", node=NODE_B))
    assert table.on_node(NODE_A) == {"default/r1"}
    assert table.on_node(NODE_B) == {"default/r2"}
    table.delete("default/r1")
    assert table.on_node(NODE_A) == set()


def test_the_namespaces_are_those_holding_a_topology() -> None:
    table = TopologyTable()
    assert table.namespaces() == set()
    table.upsert(pod("r1", namespace="lab-a"))
    table.upsert(pod("r2", namespace="lab-a"))
    table.upsert(pod("r1", namespace="lab-b"))
    assert table.namespaces() == {"lab-a", "lab-b"}
    table.delete("lab-a/r1")
    assert table.namespaces() == {"lab-a", "lab-b"}
    table.delete("lab-a/r2")
    assert table.namespaces() == {"lab-b"}
    table.namespaces().add("lab-c")  # a copy: the caller's changes stay its own
    assert table.namespaces() == {"lab-b"}


def test_an_identical_object_is_not_a_change() -> None:
    table = TopologyTable()
    table.upsert(pod("r1"))
    revision = table.revision
    table.upsert(pod("r1"))
    assert table.revision == revision
    table.upsert(pod("r1", node=NODE_A))
    assert table.revision == revision + 1


def test_a_tracker_sees_each_change_once_with_deletions_as_tombstones() -> None:
    table = TopologyTable()
    table.upsert(pod("r1"))
    tracker = table.track()
    first = tracker.next()
    assert [(c.key, c.deleted) for c in first] == [("default/r1", False)]
    table.upsert(pod("r2"))
    table.upsert(pod("r2", node=NODE_A))
    table.delete("default/r1")
    changes = tracker.next()
    assert [(c.key, c.deleted) for c in changes] == [("default/r2", False), ("default/r1", True)]
    assert changes[0].obj.status.src_ip == NODE_A
    assert tracker.next() == []


async def test_initialized_is_awaitable_and_set_once_marked() -> None:
    table = TopologyTable()
    assert not table.initialized
    table.mark_initialized()
    await table.wait_initialized()
    assert table.initialized
