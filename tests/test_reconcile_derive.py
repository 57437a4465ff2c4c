"""Which links a node must build, derived from the topologies alone."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from derive_helpers import NODE_A, NODE_B, pair, pod
from slot_helpers import HashedSlots, slot

from meshwire.control.common.ids import vni, wire_id
from meshwire.control.model.emulation import Impairments
from meshwire.control.model.topology import Link
from meshwire.control.reconcile.derive import NodeView, derive_pods
from meshwire.control.reconcile.desired import DesiredLinks
from meshwire.control.tables.links import LinkKind, new_links_table
from meshwire.control.tables.topologies import TopologyTable

ON_A = NodeView(node_ip=NODE_A)
SLOTS = HashedSlots()


def two_pods(node_r1: str, node_r2: str) -> TopologyTable:
    table = TopologyTable()
    r1, r2 = pair(1, "r1", "r2", "eth1", "eth2")
    table.upsert(pod("r1", r1, node=node_r1))
    table.upsert(pod("r2", r2, node=node_r2))
    return table


def test_two_pods_on_this_node_get_one_veth_whichever_pod_is_derived() -> None:
    table = two_pods(NODE_A, NODE_A)
    from_r1 = derive_pods(table, {"default/r1"}, ON_A, SLOTS).rows
    from_r2 = derive_pods(table, {"default/r2"}, ON_A, SLOTS).rows
    assert from_r1 == from_r2
    (row,) = from_r1.values()
    assert row.kind is LinkKind.VETH
    assert row.key == "default/1"
    assert {(e.pod, e.intf, e.netns) for e in row.ends()} == {
        ("r1", "eth1", "/var/run/netns/r1"),
        ("r2", "eth2", "/var/run/netns/r2"),
    }


def test_a_peer_on_another_node_gives_a_vxlan_end_with_the_same_vni_on_both_nodes() -> None:
    table = two_pods(NODE_A, NODE_B)
    (on_a,) = derive_pods(table, {"default/r1"}, ON_A, SLOTS).rows.values()
    (on_b,) = derive_pods(table, {"default/r2"}, NodeView(node_ip=NODE_B), SLOTS).rows.values()
    assert on_a.kind is on_b.kind is LinkKind.VXLAN
    assert on_a.peer_node_ip == NODE_B and on_b.peer_node_ip == NODE_A
    assert on_a.vni == on_b.vni == vni(slot("default"), 1, 5000)
    assert (on_a.local.pod, on_a.local.intf) == ("r1", "eth1")


def test_grpc_ends_get_distinct_stable_wire_ids() -> None:
    table = two_pods(NODE_A, NODE_B)
    view_a = NodeView(node_ip=NODE_A, inter_node_link_type="grpc")
    view_b = NodeView(node_ip=NODE_B, inter_node_link_type="grpc")
    (on_a,) = derive_pods(table, {"default/r1"}, view_a, SLOTS).rows.values()
    (on_b,) = derive_pods(table, {"default/r2"}, view_b, SLOTS).rows.values()
    assert on_a.kind is LinkKind.GRPC
    assert on_a.wire_id != on_b.wire_id
    assert on_a.wire_id == wire_id(slot("default"), 1, "r1", "r2")
    assert derive_pods(table, {"default/r1"}, view_a, SLOTS).rows == {on_a.key: on_a}


def test_a_pod_of_another_node_or_not_started_yields_nothing() -> None:
    table = two_pods(NODE_B, "")
    derived = derive_pods(table, {"default/r1", "default/r2"}, ON_A, SLOTS)
    assert derived.rows == {} and derived.problems == {}


def test_a_link_to_a_peer_that_is_not_running_is_a_detached_end_without_a_problem() -> None:
    table = two_pods(NODE_A, "")
    derived = derive_pods(table, {"default/r1"}, ON_A, SLOTS)
    assert derived.problems == {}
    [row] = derived.rows.values()
    # The pod holds its interface, without carrier, until the peer runs.
    assert row.key == "default/1/r1" and row.kind is LinkKind.DETACHED
    assert (row.local.pod, row.peer.pod, row.peer.netns) == ("r1", "r2", "")
    assert derived.waiting_for_slot == set()  # no id is due: the peer comes later


class NoSlotYet:
    """A `SlotSource` before the namespace's slot is claimed."""

    def slot_of(self, namespace: str) -> None:
        return None


def test_a_link_across_nodes_is_due_but_waits_for_its_namespaces_slot() -> None:
    table = two_pods(NODE_A, NODE_B)
    waiting = derive_pods(table, {"default/r1"}, ON_A, NoSlotYet())
    assert waiting.rows == {} and waiting.problems == {}
    assert waiting.waiting_for_slot == {"default/r1"}
    # A link on this node needs no id: nothing waits.
    local = derive_pods(two_pods(NODE_A, NODE_A), {"default/r1"}, ON_A, NoSlotYet())
    assert len(local.rows) == 1 and local.waiting_for_slot == set()
    # Desired links say so in the pod's findings, and take it back once its slot came.
    links = new_links_table()
    desired = DesiredLinks(table, links, ON_A, NoSlotYet())
    desired.step()
    assert links.findings("default/r1").waiting_for_slot
    assert desired.owes("default/r1")
    desired.slots = SLOTS
    desired.rederive_namespaces({"default"})
    assert not links.findings("default/r1").waiting_for_slot
    assert not desired.owes("default/r1")
    assert [row.kind for row in links.values()] == [LinkKind.VXLAN]


def test_localhost_gives_a_macvlan_on_the_host_interface() -> None:
    table = TopologyTable()
    host_link = Link(uid=2, peer_pod="localhost", local_intf="eth2", peer_intf="eth0")
    table.upsert(pod("r2", host_link, node=NODE_A))
    (row,) = derive_pods(table, {"default/r2"}, ON_A, SLOTS).rows.values()
    assert row.kind is LinkKind.MACVLAN
    assert row.peer.intf == "eth0" and row.local.intf == "eth2"


def test_ends_that_disagree_give_no_row_and_a_problem_naming_the_field() -> None:
    table = TopologyTable()
    r1, _ = pair(1, "r1", "r2")
    wrong = Link(uid=1, peer_pod="r1", local_intf="eth7", peer_intf="eth1")
    table.upsert(pod("r1", r1, node=NODE_A))
    table.upsert(pod("r2", wrong, node=NODE_A))
    derived = derive_pods(table, {"default/r1", "default/r2"}, ON_A, SLOTS)
    assert derived.rows == {}
    assert "default/r1" in derived.problems
    assert "uid 1" in derived.problems["default/r1"][0]


def test_a_bad_link_is_skipped_and_the_pods_other_links_still_work() -> None:
    table = TopologyTable()
    good, back = pair(1, "r1", "r2")
    bad = Link(uid=2, peer_pod="r2", local_intf="bad/name", peer_intf="eth2")
    table.upsert(pod("r1", good, bad, node=NODE_A))
    table.upsert(pod("r2", back, node=NODE_A))
    derived = derive_pods(table, {"default/r1"}, ON_A, SLOTS)
    assert list(derived.rows) == ["default/1"]
    assert "local_intf" in derived.problems["default/r1"][0]


class TestDesiredLinks:
    """The links table follows topology changes, touching only the pods involved."""

    def setup_method(self) -> None:
        self.topologies = TopologyTable()
        self.links = new_links_table()
        self.desired = DesiredLinks(self.topologies, self.links, ON_A, SLOTS)
        self.r1, self.r2 = pair(1, "r1", "r2")
        self.topologies.upsert(pod("r1", self.r1, node=NODE_A))
        self.topologies.upsert(pod("r2", self.r2, node=NODE_A))
        self.desired.step()

    def test_peer_pod_restarts_in_a_new_netns(self) -> None:
        self.topologies.upsert(pod("r2", self.r2, node=NODE_A, netns="/var/run/netns/r2-new"))
        self.desired.step()
        row = self.links.get("default/1")
        assert row is not None
        assert "/var/run/netns/r2-new" in {e.netns for e in row.ends()}

    def test_pod_moves_to_another_node_and_the_link_changes_kind(self) -> None:
        self.topologies.upsert(pod("r2", self.r2, node=NODE_B))
        self.desired.step()
        assert self.links.get("default/1") is None
        row = self.links.get("default/1/r1")
        assert row is not None and row.kind is LinkKind.VXLAN

    def test_link_removed_from_a_running_topology_goes_and_is_reported(self) -> None:
        self.topologies.upsert(pod("r1", node=NODE_A))
        self.desired.step()
        assert len(self.links) == 0
        assert self.links.findings("default/r2").problems

    def test_link_added_to_a_running_topology_is_created(self) -> None:
        a, b = pair(2, "r1", "r2", "eth2", "eth2")
        self.topologies.upsert(pod("r1", self.r1, a, node=NODE_A))
        self.topologies.upsert(pod("r2", self.r2, b, node=NODE_A))
        self.desired.step()
        assert set(self.links.keys()) == {"default/1", "default/2"}

    def test_an_unrelated_pod_change_touches_nothing_else(self) -> None:
        x, y = pair(5, "x1", "x2")
        self.topologies.upsert(pod("x1", x, node=NODE_B))
        self.topologies.upsert(pod("x2", y, node=NODE_B))
        revision = self.links.revision
        assert self.desired.step() == {"default/x1", "default/x2"}
        assert self.links.revision == revision

    def test_a_pod_deleted_takes_its_links_and_its_peer_keeps_a_detached_end(self) -> None:
        self.topologies.delete("default/r1")
        self.desired.step()
        [row] = [entry.obj for entry in self.links.rows()]
        assert row.key == "default/1/r2" and row.kind is LinkKind.DETACHED

    def test_a_pod_deleted_with_its_peer_takes_every_link(self) -> None:
        self.topologies.delete("default/r1")
        self.topologies.delete("default/r2")
        self.desired.step()
        assert len(self.links) == 0


def test_a_link_mtu_given_on_one_end_is_the_rows_on_both_nodes_and_others_keep_the_default() -> (
    None
):
    table = TopologyTable()
    r1, r2 = pair(1, "r1", "r2")
    r1_to_r3, r3 = pair(2, "r1", "r3", "eth2", "eth1")
    table.upsert(pod("r1", r1, r1_to_r3, node=NODE_A))
    table.upsert(pod("r2", dataclasses.replace(r2, mtu=9000), node=NODE_B))
    table.upsert(pod("r3", r3, node=NODE_A))
    view_a = NodeView(node_ip=NODE_A, mtu=1450)
    rows = derive_pods(table, {"default/r1"}, view_a, SLOTS).rows
    (on_b,) = derive_pods(table, {"default/r2"}, NodeView(node_ip=NODE_B), SLOTS).rows.values()
    assert (rows["default/1/r1"].mtu, on_b.mtu) == (9000, 9000)
    assert rows["default/2"].mtu == 1450


def emulated_pods(node_r1: str, node_r2: str, **r1_end: object) -> TopologyTable:
    table = TopologyTable()
    r1, r2 = pair(1, "r1", "r2", "eth1", "eth2")
    table.upsert(pod("r1", dataclasses.replace(r1, **r1_end), node=node_r1))  # type: ignore[arg-type]
    table.upsert(
        pod("r2", dataclasses.replace(r2, impairments=Impairments(loss_pct=1)), node=node_r2)
    )
    return table


def test_an_emulated_link_is_a_grpc_end_per_pod_on_one_node_and_across_nodes() -> None:
    delay = {"impairments": Impairments(delay_ms=20)}
    for node_r2 in (NODE_A, NODE_B):
        table = emulated_pods(NODE_A, node_r2, **delay)
        (on_a,) = derive_pods(table, {"default/r1"}, ON_A, SLOTS).rows.values()
        assert (on_a.kind, on_a.key, on_a.peer_node_ip) == (LinkKind.GRPC, "default/1/r1", node_r2)
        assert on_a.emulated and not on_a.down
        # Each end carries the impairments of the frames it sends.
        assert on_a.local.impairments == Impairments(delay_ms=20)
        assert on_a.peer.impairments == Impairments(loss_pct=1)
    (on_b,) = derive_pods(table, {"default/r2"}, NodeView(node_ip=NODE_B), SLOTS).rows.values()
    assert on_b.kind is LinkKind.GRPC and on_b.local.impairments == Impairments(loss_pct=1)


def test_a_cable_pulled_on_either_end_is_down_on_both_nodes() -> None:
    table = emulated_pods(NODE_A, NODE_B, state="down")
    (on_a,) = derive_pods(table, {"default/r1"}, ON_A, SLOTS).rows.values()
    (on_b,) = derive_pods(table, {"default/r2"}, NodeView(node_ip=NODE_B), SLOTS).rows.values()
    assert on_a.down and on_b.down
    table = emulated_pods(NODE_A, NODE_B, state="up")
    (on_a,) = derive_pods(table, {"default/r1"}, ON_A, SLOTS).rows.values()
    assert not on_a.down and on_a.kind is LinkKind.GRPC  # plugged: still on the workers


def test_a_link_without_emulation_stays_on_the_kernels_path() -> None:
    for node_r2, kind in ((NODE_A, LinkKind.VETH), (NODE_B, LinkKind.VXLAN)):
        (row,) = derive_pods(two_pods(NODE_A, node_r2), {"default/r1"}, ON_A, SLOTS).rows.values()
        assert row.kind is kind and not row.emulated and not row.down


class Said:
    """What the cluster says: the addresses gone, and each node's link type."""

    def __init__(
        self, gone: frozenset[str] = frozenset(), link_types: dict[str, str] | None = None
    ) -> None:
        self._gone = gone
        self._link_types = link_types or {}

    def gone(self, ip: str) -> bool:
        return ip in self._gone

    def link_type(self, ip: str) -> str | None:
        return self._link_types.get(ip)


def kind_on(node_ip: str, config: str, said: Said) -> LinkKind:
    """The kind of r1-r2's row on `node_ip`, r1 on node A and r2 on node B."""
    view = NodeView(node_ip=node_ip, inter_node_link_type=config)  # type: ignore[arg-type]
    pod_key = "default/r1" if node_ip == NODE_A else "default/r2"
    (row,) = derive_pods(two_pods(NODE_A, NODE_B), {pod_key}, view, SLOTS, said).rows.values()
    return row.kind


def test_a_peer_whose_node_was_removed_from_the_cluster_leaves_the_end_detached() -> None:
    table = two_pods(NODE_A, NODE_B)
    (row,) = derive_pods(
        table, {"default/r1"}, ON_A, SLOTS, Said(gone=frozenset({NODE_B}))
    ).rows.values()
    assert row.kind is LinkKind.DETACHED
    assert (row.local.pod, row.local.intf) == ("r1", "eth1")
    assert (row.peer.pod, row.peer.intf) == ("r2", "eth2")
    (back,) = derive_pods(table, {"default/r1"}, ON_A, SLOTS, Said()).rows.values()
    assert back.kind is LinkKind.VXLAN


@pytest.mark.parametrize(
    ("config", "said_a", "said_b", "kind"),
    [
        # Nothing said: this daemon's config, as without a cluster.
        ("grpc", None, None, LinkKind.GRPC),
        ("vxlan", None, None, LinkKind.VXLAN),
        # Both say grpc, whatever this daemon's config (it restarted, not yet written).
        ("vxlan", "grpc", "grpc", LinkKind.GRPC),
        # They differ: vxlan, until the second one says grpc.
        ("grpc", "grpc", "vxlan", LinkKind.VXLAN),
        ("grpc", "vxlan", "grpc", LinkKind.VXLAN),
        ("vxlan", "vxlan", "grpc", LinkKind.VXLAN),
        # The peer says nothing (a daemon that writes nothing): ours decides.
        ("vxlan", "grpc", None, LinkKind.GRPC),
        ("grpc", None, "vxlan", LinkKind.VXLAN),
    ],
)
def test_a_cross_node_link_is_grpc_only_while_both_nodes_say_grpc(
    config: str, said_a: str | None, said_b: str | None, kind: LinkKind
) -> None:
    said = {ip: t for ip, t in ((NODE_A, said_a), (NODE_B, said_b)) if t is not None}
    assert kind_on(NODE_A, config, Said(link_types=said)) is kind


def test_both_ends_agree_whatever_their_configs_once_both_nodes_said() -> None:
    for said_a, said_b in itertools.product(("vxlan", "grpc"), repeat=2):
        said = Said(link_types={NODE_A: said_a, NODE_B: said_b})
        kinds = {
            kind_on(node, config, said) for node in (NODE_A, NODE_B) for config in ("vxlan", "grpc")
        }
        grpc = said_a == said_b == "grpc"
        assert kinds == {LinkKind.GRPC if grpc else LinkKind.VXLAN}, (said_a, said_b)


def test_an_emulated_link_is_grpc_whatever_the_nodes_say() -> None:
    table = two_pods(NODE_A, NODE_B)
    r1 = table.get("default/r1")
    assert r1 is not None
    (link,) = r1.links
    table.upsert(dataclasses.replace(r1, links=(dataclasses.replace(link, state="up"),)))
    vxlan = Said(link_types={NODE_A: "vxlan", NODE_B: "vxlan"})
    (row,) = derive_pods(table, {"default/r1"}, ON_A, SLOTS, vxlan).rows.values()
    assert row.kind is LinkKind.GRPC
