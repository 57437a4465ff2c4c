"""A placement this node wrote stays in the topologies table until the API has it.

The informer delivers objects older than a placement written here while the
write is on its way (an API outage) or while a reconnecting watch replays the
events it missed. Those objects must not move the pod's links back into a
gone sandbox, nor tear them down; the API's object is the truth again once it
includes the write, or once the write is dropped.
"""

from __future__ import annotations

from reconciler_helpers import NODE
from slot_helpers import HashedSlots

from meshwire.control.model.topology import Link, Topology, TopologyStatus
from meshwire.control.reconcile.desired import DesiredLinks
from meshwire.control.reconcile.status_writer import StatusRead
from meshwire.control.tables.links import new_links_table
from meshwire.control.tables.local_placements import PodPlacement
from meshwire.control.tables.topologies import TopologyTable

OLD = PodPlacement(NODE.node_ip, "/ns/r1-a", "a")
NEW = PodPlacement(NODE.node_ip, "/ns/r1-b", "b")
CLEARED = PodPlacement("", "", "")


def r1(placement: PodPlacement, resource_version: int) -> Topology:
    """r1 as the API has it at `resource_version`, placed at `placement`."""
    status = TopologyStatus(
        src_ip=placement.src_ip, net_ns=placement.net_ns, container_id=placement.container_id
    )
    link = Link(uid=1, peer_pod="r2", local_intf="eth1", peer_intf="eth1")
    return Topology(
        "default", "r1", links=(link,), status=status, resource_version=str(resource_version)
    )


def shown(table: TopologyTable) -> PodPlacement:
    topology = table.get("default/r1")
    assert topology is not None
    return PodPlacement.of_status(topology.status)


def placed_here(placement: PodPlacement = NEW) -> TopologyTable:
    """A table where the API has r1 in sandbox a (resourceVersion 10) and this node
    has just written `placement`."""
    table = TopologyTable()
    table.upsert(r1(OLD, 10))
    table.place("default/r1", placement)
    return table


def test_a_placement_written_here_is_shown_at_once() -> None:
    assert shown(placed_here()) == NEW


def test_older_objects_replayed_by_the_informer_keep_the_placement_written_here() -> None:
    table = placed_here()
    table.upsert(r1(CLEARED, 11))  # the DEL of sandbox a, written before
    assert shown(table) == NEW
    table.upsert(r1(OLD, 12))  # a stale write of a
    assert shown(table) == NEW


def test_a_write_on_its_way_keeps_the_placement_whatever_the_informer_delivers() -> None:
    table = placed_here()
    table.upsert(r1(OLD, 999))
    assert shown(table) == NEW


def test_the_apis_object_takes_over_once_it_includes_the_write() -> None:
    table = placed_here()
    table.status_landed("default/r1", NEW.fields(), "20")
    table.upsert(r1(OLD, 19))  # replayed from before the write
    assert shown(table) == NEW
    table.upsert(r1(NEW, 20))
    assert shown(table) == NEW
    # Later objects are the API's own: another node placed the pod meanwhile.
    elsewhere = PodPlacement("10.9.9.9", "/ns/r1-c", "c")
    table.upsert(r1(elsewhere, 21))
    assert shown(table) == elsewhere


def test_an_object_already_past_the_write_when_it_lands_ends_it_at_once() -> None:
    table = placed_here()
    elsewhere = PodPlacement("10.9.9.9", "/ns/r1-c", "c")
    table.upsert(r1(elsewhere, 30))
    assert shown(table) == NEW
    table.status_landed("default/r1", NEW.fields(), "25")
    assert shown(table) == elsewhere


def test_a_dropped_write_gives_the_row_back_to_the_apis_object() -> None:
    table = placed_here(CLEARED)  # a DEL's clear, conditional on sandbox a
    elsewhere = PodPlacement("10.9.9.9", "/ns/r1-c", "c")
    table.upsert(r1(elsewhere, 11))
    assert shown(table) == CLEARED
    table.status_dropped("default/r1", CLEARED.fields())
    assert shown(table) == elsewhere


def test_a_write_dropped_on_a_read_shows_what_the_read_found_until_the_informer_has_it() -> None:
    # The informer lags behind after an outage: its last object still names
    # sandbox a, which the API no longer does.
    table = placed_here(NEW)
    table.status_dropped("default/r1", NEW.fields(), StatusRead(CLEARED.fields(), "15"))
    assert shown(table) == CLEARED
    table.upsert(r1(OLD, 12))  # replayed from before the read
    assert shown(table) == CLEARED
    table.upsert(r1(CLEARED, 15))
    elsewhere = PodPlacement("10.9.9.9", "/ns/r1-c", "c")
    table.upsert(r1(elsewhere, 16))  # the API's own, later
    assert shown(table) == elsewhere


def test_a_read_the_informer_is_already_past_gives_the_row_to_the_apis_object() -> None:
    table = placed_here(NEW)
    elsewhere = PodPlacement("10.9.9.9", "/ns/r1-c", "c")
    table.upsert(r1(elsewhere, 16))
    table.status_dropped("default/r1", NEW.fields(), StatusRead(CLEARED.fields(), "15"))
    assert shown(table) == elsewhere


def test_a_write_of_an_earlier_placement_says_nothing_about_a_later_one() -> None:
    table = placed_here(CLEARED)
    table.place("default/r1", NEW)
    table.status_landed("default/r1", CLEARED.fields(), "11")
    table.upsert(r1(CLEARED, 11))
    assert shown(table) == NEW
    table.status_dropped("default/r1", CLEARED.fields())
    assert shown(table) == NEW
    table.status_landed("default/r1", {"plumbing_error": ""}, "12")
    table.upsert(r1(CLEARED, 12))
    assert shown(table) == NEW


def test_without_integer_resource_versions_the_object_naming_the_placement_ends_it() -> None:
    table = TopologyTable()
    table.upsert(_opaque(r1(OLD, 10)))
    table.place("default/r1", NEW)
    table.status_landed("default/r1", NEW.fields(), "x2")
    table.upsert(_opaque(r1(OLD, 11)))
    assert shown(table) == NEW
    table.upsert(_opaque(r1(NEW, 12)))
    table.upsert(_opaque(r1(OLD, 13)))  # the API's own, later
    assert shown(table) == OLD


def test_a_deleted_object_forgets_the_placement() -> None:
    table = placed_here()
    table.delete("default/r1")
    assert table.get("default/r1") is None
    table.upsert(r1(CLEARED, 40))  # created again
    assert shown(table) == CLEARED


def test_placing_a_pod_the_table_does_not_hold_does_nothing() -> None:
    table = TopologyTable()
    table.place("default/r1", NEW)
    assert table.get("default/r1") is None


def test_a_replayed_stale_status_does_not_move_the_pods_links() -> None:
    table = placed_here()
    table.upsert(
        Topology(
            "default",
            "r2",
            links=(Link(uid=1, peer_pod="r1", local_intf="eth1", peer_intf="eth1"),),
            status=TopologyStatus(src_ip=NODE.node_ip, net_ns="/ns/r2", container_id="r2"),
            resource_version="10",
        )
    )
    links = new_links_table()
    desired = DesiredLinks(table, links, NODE, HashedSlots())
    desired.step()
    before = links.revision
    (row,) = links.values()
    assert "/ns/r1-b" in {end.netns for end in row.ends()}

    table.upsert(r1(CLEARED, 11))
    table.upsert(r1(OLD, 12))
    desired.step()
    assert links.revision == before


def _opaque(topology: Topology) -> Topology:
    """`topology` as a server with non-integer resourceVersions would send it."""
    return Topology(
        topology.namespace,
        topology.name,
        links=topology.links,
        status=topology.status,
        resource_version="x" + topology.resource_version,
    )
