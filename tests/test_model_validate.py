"""Which links of a Topology can be wired, and what the user is told about the others.

Every kind of problem is asserted on its full message: it must name the object
(`ns/name`), the link (uid and spec index) and the field at fault.
"""

from __future__ import annotations

import dataclasses

import pytest

from meshwire.control.model.topology import Link, Topology
from meshwire.control.model.validate import (
    MAX_UID,
    LinkProblem,
    check_all,
    check_pair,
    link_mtu,
    validate_topology,
)
from tests.model_helpers import link, topology


def only_problem(t: Topology) -> str:
    problems = validate_topology(t).problems
    assert len(problems) == 1, [str(p) for p in problems]
    return str(problems[0])


def test_problem_message_names_object_link_and_field() -> None:
    problem = LinkProblem("lab/r1", 7, 2, "local_ip", "bad")
    assert str(problem) == "topology lab/r1: link uid 7 (spec.links[2]): local_ip: bad"


def test_a_well_formed_pair_has_no_problems() -> None:
    r1 = topology("r1", link(1, "r2", "eth1", "eth2", "10.0.0.1/30", "10.0.0.2/30"))
    r2 = topology("r2", link(1, "r1", "eth2", "eth1", "10.0.0.2/30", "10.0.0.1/30"))
    assert validate_topology(r1).ok
    assert validate_topology(r1).links == r1.links
    assert check_pair(r1, r1.links[0], r2) is None
    assert check_all([r1, r2]) == []


@pytest.mark.parametrize(
    ("field", "name", "reason"),
    [
        ("local_intf", "", "required"),
        ("peer_intf", "", "required"),
        ("peer_intf", "e/1", "must not contain '/'"),
    ],
)
def test_interface_names_follow_the_kernel_rules(field: str, name: str, reason: str) -> None:
    fields = {"local_intf": "eth5", "peer_intf": "eth1", field: name}
    t = topology("r1", link(1, "r2"), link(5, "r2", fields["local_intf"], fields["peer_intf"]))
    message = only_problem(t)
    assert message.startswith(f"topology lab/r1: link uid 5 (spec.links[1]): {field}: ")
    assert reason in message


def test_fifteen_byte_interface_names_are_fine() -> None:
    assert validate_topology(topology("r1", link(1, "r2", "a" * 15, "b" * 15))).ok


def test_host_interface_of_a_localhost_link_follows_the_same_rules() -> None:
    assert validate_topology(topology("r1", link(2, "localhost", "eth2", "eth0"))).ok
    message = only_problem(topology("r1", link(2, "localhost", "eth2", "host/eth0")))
    assert message.startswith("topology lab/r1: link uid 2 (spec.links[0]): peer_intf: ")


@pytest.mark.parametrize(
    "address",
    ["10.0.0.1/24", "10.0.0.0/31", "10.0.0.1/32", "10.0.0.0/24", "2001:db8::1/64", "fe80::1/64"],
)
def test_interface_addresses_with_prefix_are_accepted(address: str) -> None:
    assert validate_topology(topology("r1", link(1, "r2", local_ip=address))).ok


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("10.0.0.1", "no prefix length"),
        ("10.0.0.1/", "prefix length must be a number"),
        ("10.0.0.1/255.255.255.0", "prefix length must be a number"),
        ("10.0.0.1/33", "not an IPv4 or IPv6 address"),
        ("10.0.0.256/24", "not an IPv4 or IPv6 address"),
        ("010.0.0.1/24", "not an IPv4 or IPv6 address"),
        ("2001:db8::1/129", "not an IPv4 or IPv6 address"),
        ("fe80::1%eth0/64", "zone"),
        ("r1/24", "not an IPv4 or IPv6 address"),
        ("0.0.0.0/0", "not a unicast interface address"),
        ("::/0", "not a unicast interface address"),
        ("224.0.0.5/24", "not a unicast interface address"),
        ("ff02::1/64", "not a unicast interface address"),
    ],
)
@pytest.mark.parametrize("field", ["local_ip", "peer_ip"])
def test_bad_addresses_are_reported(field: str, address: str, reason: str) -> None:
    t = topology("r1", link(9, "r2", **{field: address}))
    message = only_problem(t)
    assert message.startswith(f"topology lab/r1: link uid 9 (spec.links[0]): {field}: ")
    assert reason in message


def test_the_same_address_on_both_ends_is_reported() -> None:
    t = topology("r1", link(3, "r2", local_ip="10.0.0.1/30", peer_ip="10.0.0.1/30"))
    assert only_problem(t) == (
        "topology lab/r1: link uid 3 (spec.links[0]): peer_ip: "
        "'10.0.0.1/30' is the same address as local_ip"
    )


@pytest.mark.parametrize("uid", [0, 1, 1500, MAX_UID])
def test_uids_from_zero_to_the_vni_range_are_valid(uid: int) -> None:
    assert validate_topology(topology("r1", link(uid, "r2"))).ok


@pytest.mark.parametrize("uid", [-1, MAX_UID + 1])
def test_uids_outside_the_range_are_reported(uid: int) -> None:
    assert only_problem(topology("r1", link(uid, "r2"))) == (
        f"topology lab/r1: link uid {uid} (spec.links[0]): uid: {uid} is out of range 0..{MAX_UID}"
    )


@pytest.mark.parametrize("mtu", [0, 68, 1500, 9000, 65535])
def test_a_link_mtu_in_the_kernels_range_or_none_is_valid(mtu: int) -> None:
    assert validate_topology(topology("r1", dataclasses.replace(link(1, "r2"), mtu=mtu))).ok


@pytest.mark.parametrize("mtu", [-1, 67, 65536])
def test_a_link_mtu_outside_the_kernels_range_is_reported(mtu: int) -> None:
    t = topology("r1", dataclasses.replace(link(1, "r2"), mtu=mtu))
    assert only_problem(t) == (
        f"topology lab/r1: link uid 1 (spec.links[0]): mtu: {mtu} is out of range 68..65535"
    )


@pytest.mark.parametrize(
    ("peer_pod", "reason"),
    [
        ("", "required"),
        ("R2", "not a DNS-1123 subdomain"),
        ("r2_", "not a DNS-1123 subdomain"),
        ("-r2", "not a DNS-1123 subdomain"),
        ("r2..x", "not a DNS-1123 subdomain"),
        ("r" * 254, "at most 253"),
    ],
)
def test_peer_pod_must_be_a_pod_name(peer_pod: str, reason: str) -> None:
    message = only_problem(topology("r1", link(4, peer_pod)))
    assert message.startswith("topology lab/r1: link uid 4 (spec.links[0]): peer_pod: ")
    assert reason in message


@pytest.mark.parametrize("peer_pod", ["r2", "r2-0", "pod.sub.example", "localhost"])
def test_pod_names_and_localhost_are_valid_peers(peer_pod: str) -> None:
    assert validate_topology(topology("r1", link(1, peer_pod))).ok


def test_a_link_to_the_pod_itself_is_reported() -> None:
    assert only_problem(topology("r1", link(1, "r1", "eth1", "eth2"))) == (
        "topology lab/r1: link uid 1 (spec.links[0]): peer_pod: "
        "'r1' is the pod itself; a link needs two pods"
    )


def test_a_duplicate_interface_keeps_the_first_link_and_reports_the_later() -> None:
    first, clash = link(1, "r2", "eth1"), link(2, "r3", "eth1")
    validated = validate_topology(topology("r1", first, clash))
    assert validated.links == (first,)
    assert [str(p) for p in validated.problems] == [
        "topology lab/r1: link uid 2 (spec.links[1]): local_intf: "
        "interface 'eth1' is already used by spec.links[0]"
    ]


def test_a_duplicate_uid_keeps_the_first_link_and_reports_the_later() -> None:
    first, clash = link(1, "r2", "eth1"), link(1, "r3", "eth2")
    validated = validate_topology(topology("r1", first, clash))
    assert validated.links == (first,)
    assert [str(p) for p in validated.problems] == [
        "topology lab/r1: link uid 1 (spec.links[1]): uid: uid 1 is already used by spec.links[0]"
    ]


def test_a_bad_link_is_skipped_and_the_others_still_work() -> None:
    good1, bad, good2 = link(1, "r2", "eth1"), link(2, "r3", "eth/2"), link(3, "r4", "eth3")
    validated = validate_topology(topology("r1", good1, bad, good2))
    assert validated.links == (good1, good2)
    assert [(p.uid, p.index, p.field) for p in validated.problems] == [(2, 1, "local_intf")]


def test_every_problem_of_a_link_is_reported() -> None:
    t = topology("r1", link(1, "R2", "eth/1", "eth1", "10.0.0.1"))
    assert [p.field for p in validate_topology(t).problems] == [
        "peer_pod",
        "local_intf",
        "local_ip",
    ]


# --- both ends --------------------------------------------------------------------------------

R1 = topology("r1", link(1, "r2", "eth1", "eth2", "10.0.0.1/30", "10.0.0.2/30"))


def pair_problem(peer_link_args: dict[str, str]) -> str:
    fields = {
        "peer_pod": "r1",
        "local_intf": "eth2",
        "peer_intf": "eth1",
        "local_ip": "10.0.0.2/30",
        "peer_ip": "10.0.0.1/30",
    }
    fields.update(peer_link_args)
    r2 = topology("r2", link(1, **fields))
    problem = check_pair(R1, R1.links[0], r2)
    assert problem is not None
    return str(problem)


def test_a_missing_peer_object_is_not_a_problem_yet() -> None:
    assert check_pair(R1, R1.links[0], None) is None


def test_a_link_to_the_host_has_no_peer_object_to_agree_with() -> None:
    r1 = topology("r1", link(2, "localhost", "eth2", "eth0"))
    assert check_pair(r1, r1.links[0], None) is None


def test_a_peer_without_the_link_is_reported() -> None:
    r2 = topology("r2", link(7, "r1"))
    assert str(check_pair(R1, R1.links[0], r2)) == (
        "topology lab/r1: link uid 1 (spec.links[0]): uid: "
        "peer topology lab/r2 has no link with uid 1"
    )


def test_a_peer_pointing_elsewhere_is_reported() -> None:
    assert pair_problem({"peer_pod": "r3"}) == (
        "topology lab/r1: link uid 1 (spec.links[0]): peer_pod: "
        "peer topology lab/r2 link uid 1 points at 'r3', not back at 'r1'"
    )


def test_interfaces_that_are_not_swapped_are_reported() -> None:
    assert pair_problem({"local_intf": "eth9"}) == (
        "topology lab/r1: link uid 1 (spec.links[0]): peer_intf: "
        "'eth2' but peer topology lab/r2 link uid 1 has local_intf 'eth9'"
    )
    assert pair_problem({"peer_intf": "eth9"}) == (
        "topology lab/r1: link uid 1 (spec.links[0]): local_intf: "
        "'eth1' but peer topology lab/r2 link uid 1 has peer_intf 'eth9'"
    )


def test_addresses_that_are_not_swapped_are_reported() -> None:
    assert pair_problem({"local_ip": "10.0.0.6/30"}) == (
        "topology lab/r1: link uid 1 (spec.links[0]): peer_ip: "
        "'10.0.0.2/30' but peer topology lab/r2 link uid 1 has local_ip '10.0.0.6/30'"
    )
    assert pair_problem({"peer_ip": "10.0.0.5/30"}) == (
        "topology lab/r1: link uid 1 (spec.links[0]): local_ip: "
        "'10.0.0.1/30' but peer topology lab/r2 link uid 1 has peer_ip '10.0.0.5/30'"
    )


def test_addresses_given_on_one_side_only_or_spelled_differently_agree() -> None:
    r1 = topology("r1", link(1, "r2", "eth1", "eth1", "2001:db8::1/64", "2001:db8::2/64"))
    r2 = topology("r2", link(1, "r1", "eth1", "eth1", "2001:DB8:0::2/64"))
    assert check_pair(r1, r1.links[0], r2) is None
    assert check_pair(r2, r2.links[0], r1) is None


def test_check_pair_refuses_an_object_that_is_not_the_peer() -> None:
    with pytest.raises(ValueError, match="topology lab/r3 is not the peer of topology lab/r1"):
        check_pair(R1, R1.links[0], topology("r3"))
    with pytest.raises(ValueError, match="not a link of topology lab/r1"):
        check_pair(R1, link(5, "r2"), topology("r2"))


def test_check_all_reports_both_ends_of_a_disagreement_and_not_missing_peers() -> None:
    r1 = topology("r1", link(1, "r2", "eth1", "eth1"), link(2, "r9", "eth2", "eth1"))
    r2 = topology("r2", link(1, "r1", "eth1", "eth3"))
    assert [str(p) for p in check_all([r1, r2])] == [
        "topology lab/r1: link uid 1 (spec.links[0]): local_intf: "
        "'eth1' but peer topology lab/r2 link uid 1 has peer_intf 'eth3'",
        "topology lab/r2: link uid 1 (spec.links[0]): peer_intf: "
        "'eth3' but peer topology lab/r1 link uid 1 has local_intf 'eth1'",
    ]


def test_objects_in_other_namespaces_are_not_peers() -> None:
    r1 = topology("r1", link(1, "r2"))
    r2_elsewhere = topology("r2", link(1, "r1", "eth9"), namespace="other")
    assert check_all([r1, r2_elsewhere]) == []


def test_a_changed_peer_object_is_checked_afresh() -> None:
    r2 = topology("r2", link(1, "r1", "eth2", "eth1", "10.0.0.2/30", "10.0.0.1/30"))
    assert check_pair(R1, R1.links[0], r2) is None
    r2_changed = topology("r2", link(1, "r1", "eth7", "eth1"))
    problem = check_pair(R1, R1.links[0], r2_changed)
    assert problem is not None and problem.field == "peer_intf"


def test_an_equal_copy_of_a_link_is_found_at_its_index() -> None:
    r1 = topology("r1", link(1, "r2"), link(2, "r3", "eth2"))
    problem = check_pair(r1, link(2, "r3", "eth2"), topology("r3"))
    assert problem is not None and (problem.uid, problem.index) == (2, 1)


def test_mtus_given_on_both_ends_must_be_equal() -> None:
    r1 = topology("r1", dataclasses.replace(R1.links[0], mtu=9000))
    r2 = topology("r2", Link(1, "r1", "eth2", "eth1", mtu=1500))
    assert str(check_pair(r1, r1.links[0], r2)) == (
        "topology lab/r1: link uid 1 (spec.links[0]): mtu: "
        "9000 but peer topology lab/r2 link uid 1 has mtu 1500"
    )
    same = topology("r2", Link(1, "r1", "eth2", "eth1", mtu=9000))
    assert check_pair(r1, r1.links[0], same) is None


def test_a_link_mtu_given_on_one_end_holds_for_both() -> None:
    r1 = topology("r1", Link(1, "r2", "eth1", "eth2"))
    r2 = topology("r2", Link(1, "r1", "eth2", "eth1", mtu=9000))
    assert check_pair(r1, r1.links[0], r2) is None
    assert link_mtu(r1.links[0], r2, 1500) == link_mtu(r2.links[0], r1, 1500) == 9000
    assert link_mtu(r1.links[0], None, 1500) == 1500
    assert link_mtu(r1.links[0], topology("r2", Link(1, "r1", "eth2", "eth1")), 1400) == 1400


def test_a_link_is_found_by_uid_the_first_of_its_uid_without_touching_equality() -> None:
    first = Link(1, "r2", "eth1", "eth1")
    again = Link(1, "r3", "eth2", "eth1")
    links = (first, *(Link(uid, "r2", f"e{uid}", f"e{uid}") for uid in range(2, 1500)), again)
    looked_up = Topology("default", "r1", links=links)
    fresh = Topology("default", "r1", links=links)
    assert looked_up.link(1) is first
    assert looked_up.link(1499) == Link(1499, "r2", "e1499", "e1499")
    assert looked_up.link(1500) is None
    assert looked_up == fresh and hash(looked_up) == hash(fresh)
    edited = dataclasses.replace(looked_up, links=(again,))
    assert edited.link(1) is again
