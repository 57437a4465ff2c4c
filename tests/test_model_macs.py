"""MAC addresses of link ends: a link's own `local_mac`, validated, or a stable derived one.

The derived MAC must be a valid interface address (locally administered,
unicast), the same wherever and whenever the pod runs, and never the same as
the other end's: a link's segment holds exactly its two ends.
"""

from __future__ import annotations

import dataclasses
import itertools
import random

import pytest
from derive_helpers import NODE_A, NODE_B, pair, pod
from slot_helpers import HashedSlots

from meshwire.control.model.macs import derived_mac, end_mac, mac_problem
from meshwire.control.model.topology import Link, Topology
from meshwire.control.model.validate import check_pair, validate_topology
from meshwire.control.reconcile.derive import NodeView, derive_pods
from meshwire.control.tables.links import LinkKind
from meshwire.control.tables.topologies import TopologyTable
from tests.model_helpers import link, topology


def first_byte(mac: str) -> int:
    return int(mac[:2], 16)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("02:00:5e:10:00:01", None),
        ("AA:BB:CC:DD:EE:FE", None),
        ("00:1c:73:00:00:01", None),  # a vendor's (globally administered) prefix
        ("02:00:5e:10:00", "is not a MAC address"),
        ("02-00-5e-10-00-01", "is not a MAC address"),
        ("02:00:5e:10:00:01:02", "is not a MAC address"),
        ("0200.5e10.0001", "is not a MAC address"),
        ("02:00:5e:10:00:0g", "is not a MAC address"),
        (" 02:00:5e:10:00:01", "is not a MAC address"),
        ("01:00:5e:00:00:01", "is a multicast address"),
        ("ff:ff:ff:ff:ff:ff", "is a multicast address"),
        ("00:00:00:00:00:00", "is all zero"),
    ],
)
def test_a_given_mac_must_be_a_unicast_interface_address(value: str, reason: str | None) -> None:
    problem = mac_problem(value)
    if reason is None:
        assert problem is None
    else:
        assert problem is not None and reason in problem and repr(value) in problem


def test_a_bad_local_mac_is_a_problem_naming_object_link_and_field() -> None:
    bad = dataclasses.replace(link(7, "r2"), local_mac="01:00:5e:00:00:01")
    good = link(8, "r3", "eth2")
    validated = validate_topology(topology("r1", good, bad))

    assert validated.links == (good,)
    (problem,) = validated.problems
    assert str(problem) == (
        "topology lab/r1: link uid 7 (spec.links[1]): local_mac: '01:00:5e:00:00:01' is a "
        "multicast address (bit 0x01 of the first byte); an interface needs a unicast one"
    )


def with_macs(a_mac: str, b_mac: str) -> tuple[Topology, Topology]:
    a, b = pair(1, "r1", "r2")
    return (
        topology("r1", dataclasses.replace(a, local_mac=a_mac)),
        topology("r2", dataclasses.replace(b, local_mac=b_mac)),
    )


def test_the_two_ends_given_one_mac_are_refused() -> None:
    r1, r2 = with_macs("02:00:00:00:00:01", "02:00:00:00:00:01")
    problem = check_pair(r1, r1.links[0], r2)
    assert str(problem) == (
        "topology lab/r1: link uid 1 (spec.links[0]): local_mac: the MAC 02:00:00:00:00:01 "
        "is also the MAC of peer topology lab/r2 link uid 1"
    )


def test_a_given_mac_equal_to_the_other_ends_derived_one_is_refused_from_both_sides() -> None:
    derived = derived_mac("lab", "r1", "eth1", "r2", "eth1")
    r1, r2 = with_macs("", derived.upper())
    assert "local_mac: the derived MAC " + derived in str(check_pair(r1, r1.links[0], r2))
    assert "local_mac: the MAC " + derived in str(check_pair(r2, r2.links[0], r1))


def test_distinct_given_macs_pass() -> None:
    r1, r2 = with_macs("02:00:00:00:00:01", "02:00:00:00:00:02")
    assert check_pair(r1, r1.links[0], r2) is None
    assert end_mac("lab", "r1", r1.links[0]) == "02:00:00:00:00:01"


def test_a_given_mac_is_used_in_lower_case() -> None:
    given = dataclasses.replace(link(1, "r2"), local_mac="0A:BB:CC:DD:EE:FF")
    assert end_mac("lab", "r1", given) == "0a:bb:cc:dd:ee:ff"


def random_names(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choices("abcdefgh-0123456789", k=rng.randint(1, 12))) for _ in range(count)]


def test_a_derived_mac_is_locally_administered_unicast_and_depends_on_the_end_alone() -> None:
    for pod_name, intf in itertools.product(random_names(1, 40), ["eth1", "e1-1", "ge-0"]):
        mac = derived_mac("ns", pod_name, intf, "peer", "eth9")
        assert mac_problem(mac) is None
        assert first_byte(mac) & 0x03 == 0x02  # locally administered, unicast
        assert mac == derived_mac("ns", pod_name, intf, "peer", "eth9")
    assert derived_mac("ns1", "r1", "eth1", "r2", "eth1") != derived_mac(
        "ns2", "r1", "eth1", "r2", "eth1"
    )


def test_the_two_derived_ends_of_any_link_never_share_a_mac() -> None:
    # Proof: the two ends are different pods (a self-link is invalid), so
    # exactly one end sorts after the other and has the side bit set.
    names = random_names(2, 60)
    for a, b in itertools.combinations(names, 2):
        if a == b:
            continue
        for a_intf, b_intf in (("eth1", "eth1"), ("eth1", "eth2"), ("eth2", "eth1")):
            mac_a = derived_mac("ns", a, a_intf, b, b_intf)
            mac_b = derived_mac("ns", b, b_intf, a, a_intf)
            assert first_byte(mac_a) & 0x04 != first_byte(mac_b) & 0x04
            assert mac_a != mac_b


def ends(table: TopologyTable, pod_key: str, node: str) -> dict[str, str]:
    rows = derive_pods(table, {pod_key}, NodeView(node_ip=node), HashedSlots()).rows
    return {f"{e.pod}:{e.intf}": e.mac for row in rows.values() for e in (row.local, row.peer)}


def test_rows_carry_each_ends_mac_the_same_across_restarts_moves_and_nodes() -> None:
    r1, r2 = pair(1, "r1", "r2", "eth1", "eth2")
    table = TopologyTable()
    table.upsert(pod("r1", r1, node=NODE_A))
    table.upsert(pod("r2", r2, node=NODE_B))
    across = ends(table, "default/r1", NODE_A)
    assert across == ends(table, "default/r2", NODE_B)  # both nodes agree
    assert across["r1:eth1"] != across["r2:eth2"]

    table.upsert(pod("r2", r2, node=NODE_B, netns="/var/run/netns/r2-restarted"))
    assert ends(table, "default/r1", NODE_A) == across
    table.upsert(pod("r2", r2, node=NODE_A))  # moved: the link is a veth now
    derived = derive_pods(table, {"default/r2"}, NodeView(node_ip=NODE_A), HashedSlots())
    (row,) = derived.rows.values()
    assert row.kind is LinkKind.VETH
    assert ends(table, "default/r2", NODE_A) == across


def test_a_links_local_mac_is_its_ends_mac_on_the_peer_node_too() -> None:
    r1, r2 = pair(1, "r1", "r2")
    table = TopologyTable()
    table.upsert(pod("r1", dataclasses.replace(r1, local_mac="02:aa:00:00:00:01"), node=NODE_A))
    table.upsert(pod("r2", r2, node=NODE_B))
    assert ends(table, "default/r2", NODE_B)["r1:eth1"] == "02:aa:00:00:00:01"
    assert ends(table, "default/r1", NODE_A)["r1:eth1"] == "02:aa:00:00:00:01"


def test_a_topology_read_from_the_api_keeps_local_mac_and_one_without_it_derives() -> None:
    raw = {
        "metadata": {"name": "r1"},
        "spec": {"links": [{"uid": 1, "peer_pod": "r2", "local_intf": "eth1",
                            "peer_intf": "eth1", "local_mac": "02:00:00:00:00:09"}]},
    }  # fmt: skip
    loaded = Topology.from_dict(raw)
    assert loaded.links[0].local_mac == "02:00:00:00:00:09"
    assert Topology.from_dict(loaded.to_dict()) == loaded
    # A CRD that prunes the field: the derived MAC still holds.
    del raw["spec"]["links"][0]["local_mac"]
    pruned = Topology.from_dict(raw).links[0]
    assert pruned == Link(1, "r2", "eth1", "eth1")
    assert end_mac("default", "r1", pruned) == derived_mac("default", "r1", "eth1", "r2", "eth1")
