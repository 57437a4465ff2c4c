"""The placement keeper: a status that names this node or none says what runs here.

The keeper writes a pod's placement again while it holds the pod's sandbox
(ADDed here, not DELeted) and the status names no container, or another
container on this node; it clears a status that names a container on this
node when it holds none. Each write lands only while the status still names
the container the keeper saw. A status naming another node is left alone.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from reconciler_helpers import NODE

from meshwire.control.daemon.placements import PlacementKeeper
from meshwire.control.daemon.sandbox_store import Sandbox, SandboxStore
from meshwire.control.links.netns import identity_of
from meshwire.control.model.topology import Topology, TopologyStatus
from meshwire.control.tables.topologies import TopologyTable

HERE = TopologyStatus(src_ip=NODE.node_ip, net_ns="/ns/r1-b", container_id="b")
ELSEWHERE = TopologyStatus(src_ip="10.9.9.9", net_ns="/ns/r1-c", container_id="c")


class Written:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, key: str, **fields: Any) -> None:
        self.calls.append((key, fields))


NONE = TopologyStatus()


def r1(status: TopologyStatus = NONE) -> Topology:
    return Topology("default", "r1", status=status)


def synced(*objects: Topology) -> tuple[TopologyTable, PlacementKeeper, Written]:
    table, written = TopologyTable(), Written()
    for obj in objects:
        table.upsert(obj)
    table.mark_initialized()
    keeper = PlacementKeeper(NODE.node_ip, table, written)
    keeper.seed()
    keeper.step()
    return table, keeper, written


REWRITE = {
    "if_container": "",
    "src_ip": NODE.node_ip,
    "net_ns": "/ns/r1-b",
    "container_id": "b",
}


def test_a_held_pod_whose_status_was_cleared_gets_its_placement_written_again() -> None:
    table, keeper, written = synced(r1())
    keeper.added("default/r1", "b", "/ns/r1-b")
    table.upsert(r1(HERE))  # the ADD's placement lands...
    table.upsert(r1())  # ...and a late clear from the pod's old node wipes it

    assert keeper.step() == ["default/r1"]
    assert written.calls == [("default/r1", REWRITE)]
    # The table has the placement at once, so the links are derived again now.
    obj = table.get("default/r1")
    assert obj is not None and obj.status == HERE


def test_a_topology_created_again_while_its_pod_runs_here_gets_the_placement() -> None:
    table, keeper, written = synced(r1(HERE))
    table.delete("default/r1")
    assert keeper.step() == []
    table.upsert(r1())
    assert keeper.step() == ["default/r1"]
    assert written.calls == [("default/r1", REWRITE)]


def test_a_status_naming_another_node_is_left_alone() -> None:
    table, keeper, written = synced(r1(HERE))
    table.upsert(r1(ELSEWHERE))
    assert keeper.step() == []
    assert written.calls == []
    assert keeper.held("default/r1") == Sandbox("b", "/ns/r1-b")


def test_a_status_naming_an_older_sandbox_here_gets_the_held_one() -> None:
    # A late write of this node's previous daemon names sandbox a, gone since.
    table, keeper, written = synced(r1(HERE))
    table.upsert(r1(dataclasses.replace(HERE, net_ns="/ns/r1-a", container_id="a")))
    assert keeper.step() == ["default/r1"]
    assert written.calls == [("default/r1", {**REWRITE, "if_container": "a"})]
    obj = table.get("default/r1")
    assert obj is not None and obj.status == HERE


CLEAR = {"if_container": "b", "src_ip": "", "net_ns": "", "container_id": ""}


def test_a_status_naming_a_sandbox_here_that_is_not_held_is_cleared() -> None:
    # After the DEL of b, its placement is back: a clear that waited out an API
    # outage was dropped, its condition naming an ADD the API never saw.
    table, keeper, written = synced(r1())
    keeper.added("default/r1", "b", "/ns/r1-b")
    keeper.deleted("default/r1", "b")
    table.upsert(r1(HERE))
    assert keeper.step() == ["default/r1"]
    assert written.calls == [("default/r1", CLEAR)]
    obj = table.get("default/r1")
    assert obj is not None and obj.status == NONE


def test_a_status_naming_this_node_without_a_container_is_not_cleared() -> None:
    table, keeper, written = synced(r1())
    table.upsert(r1(TopologyStatus(src_ip=NODE.node_ip)))
    assert keeper.step() == []
    assert written.calls == []


def test_after_a_del_of_the_held_sandbox_a_cleared_status_stays_cleared() -> None:
    table, keeper, written = synced(r1(HERE))
    keeper.deleted("default/r1", "b")
    table.upsert(r1())
    assert keeper.step() == []
    assert written.calls == []


def test_a_late_del_of_an_older_sandbox_keeps_the_current_one_held() -> None:
    table, keeper, _ = synced(r1(HERE))
    keeper.deleted("default/r1", "a")
    table.upsert(r1())
    assert keeper.step() == ["default/r1"]


def test_a_pod_placed_on_another_node_is_not_held_after_a_restart() -> None:
    table, keeper, _ = synced(r1(ELSEWHERE))
    table.upsert(r1())
    assert keeper.step() == []
    assert keeper.held("default/r1") is None


def test_seeding_happens_once_so_a_del_before_a_later_seed_call_is_not_undone() -> None:
    _, keeper, _ = synced(r1(HERE))
    keeper.deleted("default/r1", "b")
    keeper.seed()
    assert keeper.held("default/r1") is None


def test_only_a_status_change_of_a_held_pod_is_looked_at() -> None:
    table, keeper, written = synced(r1(HERE), Topology("default", "r2"))
    table.upsert(
        dataclasses.replace(r1(HERE), status=dataclasses.replace(HERE, plumbing_error="x"))
    )
    table.upsert(Topology("default", "r2", status=TopologyStatus(plumbing_error="y")))
    assert keeper.step() == []
    assert written.calls == []


# -- with a sandbox store: what a restarted daemon still knows ----------------


def restarted(store: SandboxStore, *objects: Topology) -> tuple[PlacementKeeper, Written]:
    """A new keeper on `store`, as a restarted daemon starts it once the table synced."""
    table, written = TopologyTable(), Written()
    for obj in objects:
        table.upsert(obj)
    table.mark_initialized()
    keeper = PlacementKeeper(NODE.node_ip, table, written, store)
    keeper.start()
    return keeper, written


def existing(tmp_path: Path, name: str) -> str:
    path = tmp_path / name
    path.touch()
    return str(path)


def test_a_placement_lost_while_the_daemon_was_down_is_written_back_after_its_restart(
    tmp_path: Path,
) -> None:
    store = SandboxStore(tmp_path / "state")
    netns = existing(tmp_path, "r1-b")
    PlacementKeeper(NODE.node_ip, TopologyTable(), Written(), store).added("default/r1", "b", netns)

    # Down meanwhile: the Topology was deleted and created again, its status empty.
    keeper, written = restarted(store, r1())
    assert written.calls == [("default/r1", {**REWRITE, "net_ns": netns})]
    assert keeper.held("default/r1") == Sandbox("b", netns, identity=identity_of(netns))
    assert keeper.handed(netns)


def test_a_sandbox_deleted_before_the_restart_is_not_written_back(tmp_path: Path) -> None:
    store = SandboxStore(tmp_path / "state")
    netns = existing(tmp_path, "r1-b")
    before = PlacementKeeper(NODE.node_ip, TopologyTable(), Written(), store)
    before.added("default/r1", "b", netns)
    before.deleted("default/r1", "b")

    keeper, written = restarted(store, r1())
    assert written.calls == []
    assert keeper.held("default/r1") is None


def test_the_sandbox_added_last_here_wins_over_an_older_one_the_api_names(
    tmp_path: Path,
) -> None:
    # The API still names sandbox b here; the ADD of c was this node's last word,
    # answered while the API was down.
    store = SandboxStore(tmp_path / "state")
    netns = existing(tmp_path, "r1-c")
    assert store.save("default/r1", Sandbox("c", netns))
    keeper, written = restarted(store, r1(HERE))
    assert keeper.held("default/r1") == Sandbox("c", netns)
    rewrite = {**REWRITE, "if_container": "b", "net_ns": netns, "container_id": "c"}
    assert written.calls == [("default/r1", rewrite)]


def test_added_says_whether_the_sandbox_is_on_disk(tmp_path: Path) -> None:
    table = TopologyTable()
    assert not PlacementKeeper(NODE.node_ip, table, Written()).added("default/r1", "b", "/x")
    stored = PlacementKeeper(NODE.node_ip, table, Written(), SandboxStore(tmp_path / "state"))
    assert stored.added("default/r1", "b", "/x")
    (tmp_path / "file").touch()
    unwritable = PlacementKeeper(NODE.node_ip, table, Written(), SandboxStore(tmp_path / "file"))
    assert not unwritable.added("default/r1", "b", "/x")


def test_what_the_api_says_runs_here_is_recorded_when_the_store_lacks_it(tmp_path: Path) -> None:
    # A daemon upgraded from a version without the store: it records what it holds.
    store = SandboxStore(tmp_path / "state")
    netns = existing(tmp_path, "r1-b")
    restarted(store, r1(dataclasses.replace(HERE, net_ns=netns)))
    assert store.load() == {"default/r1": Sandbox("b", netns)}


def test_a_sandbox_deleted_before_the_api_heard_is_cleared_after_a_restart(
    tmp_path: Path,
) -> None:
    # Both DELs were answered during an API outage; the API still names sandbox b,
    # and the daemon restarted before the API came back.
    store = SandboxStore(tmp_path / "state")
    netns = existing(tmp_path, "r1-b")
    before = PlacementKeeper(NODE.node_ip, TopologyTable(), Written(), store)
    before.added("default/r1", "b", netns)
    before.deleted("default/r1", "b")
    assert before.deleted_late("default/r1", "a")
    assert before.deleted_late("default/r1", "b")

    keeper, written = restarted(store, r1(HERE))
    assert keeper.held("default/r1") is None
    assert written.calls == [("default/r1", CLEAR)]
    # The record of a's DEL is of no more use: the API does not name a.
    assert store.load_deleted() == {("default/r1", "b")}


def test_a_del_is_not_recorded_without_a_store() -> None:
    keeper = PlacementKeeper(NODE.node_ip, TopologyTable(), Written())
    assert not keeper.deleted_late("default/r1", "b")


# -- the namespaces a CNI ADD handed the daemon (netns_guard.py) --------------


def test_a_namespace_is_handed_by_the_add_that_found_it_there(tmp_path: Path) -> None:
    _, keeper, _ = synced(r1())
    netns = existing(tmp_path, "r1-b")
    assert not keeper.handed(netns)
    keeper.added("default/r1", "b", netns)
    assert keeper.handed(netns)
    assert not keeper.handed(existing(tmp_path, "elsewhere"))


def test_a_path_pointed_at_another_namespace_is_no_longer_handed(tmp_path: Path) -> None:
    _, keeper, _ = synced(r1())
    netns = existing(tmp_path, "r1-b")
    keeper.added("default/r1", "b", netns)
    # Something else now at the same path: another identity (st_dev, st_ino).
    (tmp_path / "other").touch()
    (tmp_path / "other").replace(netns)
    assert not keeper.handed(netns)
    assert not keeper.was_handed(netns)


def test_a_status_alone_hands_no_namespace(tmp_path: Path) -> None:
    # A status naming this node (a forged one, or one from before the store) is held,
    # for the keeper to keep the status right, but vouches for no namespace.
    netns = existing(tmp_path, "victim")
    _, keeper, _ = synced(r1(dataclasses.replace(HERE, net_ns=netns)))
    assert keeper.held("default/r1") == Sandbox("b", netns)
    assert not keeper.handed(netns)
    assert not keeper.was_handed(netns)


def test_a_deleted_sandbox_leaves_its_namespace_released_until_it_changes(
    tmp_path: Path,
) -> None:
    _, keeper, _ = synced(r1())
    old, new = existing(tmp_path, "r1-b"), existing(tmp_path, "r1-c")
    keeper.added("default/r1", "b", old)
    keeper.added("default/r1", "c", new)  # the pod restarted: the old netns is released
    assert not keeper.handed(old) and keeper.was_handed(old)
    keeper.deleted("default/r1", "c")
    assert not keeper.handed(new) and keeper.was_handed(new)
    Path(new).unlink()  # the runtime removed the netns
    assert not keeper.was_handed(new)


def test_the_handed_namespaces_survive_a_restart_through_the_store(tmp_path: Path) -> None:
    store = SandboxStore(tmp_path / "state")
    netns = existing(tmp_path, "r1-b")
    PlacementKeeper(NODE.node_ip, TopologyTable(), Written(), store).added("default/r1", "b", netns)
    keeper, _ = restarted(store, r1(dataclasses.replace(HERE, net_ns=netns)))
    assert keeper.handed(netns)
