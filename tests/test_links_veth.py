"""veth links between two pods of this node, realised in real network namespaces.

Each pod holds a pod end (a veth whose peer is in the node's netns, here the
test's own `host` netns); the link is the two node sides stitched together.
"""

from __future__ import annotations

import pytest
from links_helpers import (
    Namespaces,
    addresses,
    carrier,
    ip,
    links,
    namespaces,
    needs_root,
    netns_name,
    pings,
    reaper,
    veth_across,
    veth_row,
    wait_until,
)

from meshwire.control.links import rtnl
from meshwire.control.links.aside import Reaper
from meshwire.control.links.driver import Drivers, kernel_drivers
from meshwire.control.links.driver_errors import LinkError, SpecError
from meshwire.control.links.iface_names import BUILD_GROUP, pod_peer_name
from meshwire.control.links.netns import netlink, open_netns

pytestmark = [needs_root, pytest.mark.root]
__all__ = ["namespaces", "reaper"]

WAIT = 30.0


@pytest.fixture
def host(namespaces: Namespaces) -> str:
    # Node sides live in a host netns of the test's own, never in the real root netns.
    return namespaces.add("host")


@pytest.fixture
def driver(host: str, reaper: Reaper) -> Drivers:
    return Drivers(kernel_drivers(host_netns=host, reaper=reaper))


def node_sides(host: str) -> set[str]:
    return {name for name in links(host) if name.startswith("mn")}


def test_pair_carries_v4_and_v6_between_the_pods(
    namespaces: Namespaces, driver: Drivers, host: str
) -> None:
    a, b = namespaces.add("a"), namespaces.add("b")
    row = veth_row(a, b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30", mtu=9000)
    driver.update(row)
    driver.update(
        veth_row(
            a, b, uid=2, a_intf="e2", b_intf="e2", a_ip="2001:db8::1/64", b_ip="2001:db8::2/64"
        )
    )

    end_a, end_b = links(a)["eth1"], links(b)["eth1"]
    assert end_a["linkinfo"]["info_kind"] == end_b["linkinfo"]["info_kind"] == "veth"
    # Each pod end's peer is its node side, in the node's netns.
    assert node_sides(host) == {
        pod_peer_name("lab", pod, intf) for pod in ("r1", "r2") for intf in ("eth1", "e2")
    }
    assert end_a["ifalias"] == end_b["ifalias"] == "meshwire:lab/1"
    assert end_a["mtu"] == end_b["mtu"] == 9000
    assert "UP" in end_a["flags"] and "UP" in end_b["flags"]
    assert addresses(a, "eth1") == {"10.0.0.1/30"}
    assert pings(a, "10.0.0.2") and pings(b, "10.0.0.1")
    assert pings(a, "2001:db8::2") and pings(b, "2001:db8::1")


def test_a_second_update_changes_nothing(namespaces: Namespaces, driver: Drivers) -> None:
    a, b = namespaces.add("a"), namespaces.add("b")
    row = veth_row(a, b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30")
    driver.update(row)
    # The kernel's link watch sets operstate up to a second after the carrier.
    wait_until(lambda: links(a)["eth1"]["operstate"] == links(b)["eth1"]["operstate"] == "UP")
    before = (links(a)["eth1"], links(b)["eth1"])
    driver.update(row)
    after = (links(a)["eth1"], links(b)["eth1"])
    assert [e["ifindex"] for e in after] == [e["ifindex"] for e in before]
    assert after == before
    assert addresses(a, "eth1") == {"10.0.0.1/30"}


def test_a_deleted_end_is_repaired_and_the_other_end_kept(
    namespaces: Namespaces, driver: Drivers
) -> None:
    a, b = namespaces.add("a"), namespaces.add("b")
    row = veth_row(a, b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30")
    driver.update(row)
    kept = links(a)["eth1"]["ifindex"]
    ip("-n", netns_name(b), "link", "del", "eth1")  # takes its node side along
    driver.update(row)
    assert pings(a, "10.0.0.2")
    assert links(a)["eth1"]["ifindex"] == kept


@pytest.mark.parametrize("restarted", ["local", "peer"])
def test_pod_restart_in_a_new_netns_is_repaired_from_the_same_row(
    namespaces: Namespaces, driver: Drivers, restarted: str
) -> None:
    a, b = namespaces.add("a"), namespaces.add("b")
    row = veth_row(a, b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30")
    driver.update(row)
    survivor = b if restarted == "local" else a
    kept = links(survivor)["eth1"]["ifindex"]
    namespaces.recreate(a if restarted == "local" else b)
    driver.update(row)
    assert pings(a, "10.0.0.2") and pings(b, "10.0.0.1")
    assert links(survivor)["eth1"]["ifindex"] == kept


def test_peer_netns_moved_while_the_old_one_lives_on(
    namespaces: Namespaces, driver: Drivers, reaper: Reaper
) -> None:
    # The pod restarted under a new netns path while its old netns is still held
    # open: its old end's node side holds the name the new one needs.
    a, old_b, new_b = namespaces.add("a"), namespaces.add("b"), namespaces.add("b2")
    driver.update(veth_row(a, old_b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))
    kept = links(a)["eth1"]["ifindex"]
    driver.update(veth_row(a, new_b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))
    assert "eth1" in links(new_b)
    assert pings(a, "10.0.0.2")
    assert links(a)["eth1"]["ifindex"] == kept
    # The old end goes with its node side, set aside and deleted a moment later.
    assert reaper.settle(WAIT)
    assert "eth1" not in links(old_b)
    assert set(links(a)) == {"lo", "eth1"}


def test_address_change_replaces_only_meshwires_address(
    namespaces: Namespaces, driver: Drivers
) -> None:
    a, b = namespaces.add("a"), namespaces.add("b")
    driver.update(veth_row(a, b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))
    ip("-n", netns_name(a), "addr", "add", "192.0.2.1/24", "dev", "eth1")  # the NOS's own
    driver.update(veth_row(a, b, a_ip="10.0.1.1/30", b_ip="10.0.1.2/30"))
    assert addresses(a, "eth1") == {"10.0.1.1/30", "192.0.2.1/24"}
    assert addresses(b, "eth1") == {"10.0.1.2/30"}
    assert pings(a, "10.0.1.2")


def test_mtu_change_is_applied_in_place(namespaces: Namespaces, driver: Drivers) -> None:
    a, b = namespaces.add("a"), namespaces.add("b")
    driver.update(veth_row(a, b, mtu=1500))
    index = links(a)["eth1"]["ifindex"]
    driver.update(veth_row(a, b, mtu=9100))
    assert links(a)["eth1"]["mtu"] == links(b)["eth1"]["mtu"] == 9100
    assert links(a)["eth1"]["ifindex"] == index


def test_name_taken_by_a_foreign_interface_is_a_spec_error_and_left_alone(
    namespaces: Namespaces, driver: Drivers
) -> None:
    a, b = namespaces.add("a"), namespaces.add("b")
    ip("-n", netns_name(b), "link", "add", "eth1", "type", "bridge")
    foreign = links(b)["eth1"]
    with pytest.raises(SpecError) as caught:
        driver.update(veth_row(a, b))
    message = str(caught.value)
    assert "lab/1" in message and b in message and "'eth1'" in message
    assert links(b)["eth1"] == foreign
    # a's end is made, without carrier: its far end cannot be.
    assert not carrier(a, "eth1")
    driver.delete(veth_row(a, b))
    assert links(b)["eth1"] == foreign
    assert "eth1" not in links(a)


def test_missing_netns_is_transient_and_names_the_path(
    namespaces: Namespaces, driver: Drivers
) -> None:
    a = namespaces.add("a")
    gone = f"/var/run/netns/{namespaces.prefix}-never"
    with pytest.raises(LinkError) as caught:
        driver.update(veth_row(a, gone))
    assert gone in str(caught.value)


def test_delete_removes_both_ends_and_is_idempotent(
    namespaces: Namespaces, driver: Drivers, host: str
) -> None:
    a, b = namespaces.add("a"), namespaces.add("b")
    row = veth_row(a, b)
    driver.update(row)
    driver.delete(row)
    assert set(links(a)) == set(links(b)) == {"lo"}
    assert node_sides(host) == set()
    driver.delete(row)
    namespaces.recreate(b)
    ip("netns", "del", netns_name(b))
    driver.delete(row)  # a vanished netns is success too


@pytest.mark.parametrize("then", ["update", "delete"])
def test_a_half_made_pod_end_left_by_a_crash_is_cleared(
    namespaces: Namespaces, driver: Drivers, host: str, then: str
) -> None:
    a, b = namespaces.add("a"), namespaces.add("b")
    row = veth_row(a, b)
    # A crash right after creation: the pod end sits under its final names, in
    # the build group, not marked yet.
    with open_netns(a) as ans, open_netns(host) as hns, netlink(ans) as ipr:
        node_side = pod_peer_name("lab", "r1", "eth1")
        ipr.rtnl.request(rtnl.new_veth("eth1", node_side, hns.fd, group=BUILD_GROUP))
    assert links(a)["eth1"]["group"] == str(BUILD_GROUP)
    getattr(driver, then)(row)
    assert set(links(a)) == set(links(b)) == ({"lo", "eth1"} if then == "update" else {"lo"})
    if then == "update":
        for pod in (a, b):
            assert links(pod)["eth1"]["group"] == "default"
            assert links(pod)["eth1"]["ifalias"] == "meshwire:lab/1"


def test_a_half_made_pair_no_row_wants_is_listed_for_pruning_and_removed(
    namespaces: Namespaces, driver: Drivers
) -> None:
    a, b = namespaces.add("a"), namespaces.add("b")
    with open_netns(a) as ans, open_netns(b) as bns, netlink(ans) as ipr:
        ipr.rtnl.request(rtnl.new_veth("eth7", "eth7", bns.fd, group=BUILD_GROUP))
        # Unmarked and in another group: a NOS's, never listed.
        ipr.rtnl.request(rtnl.new_veth("nos7", "nos8", bns.fd))
    owned = driver.owned(a)
    assert [(found.name, found.mark) for found in owned] == [("eth7", None)]
    driver.remove(a, "eth7")
    driver.remove(a, "nos7")
    assert set(links(a)) == {"lo", "nos7"}
    assert set(links(b)) == {"lo", "nos8"}


def test_a_pair_made_by_an_earlier_version_becomes_two_pod_ends(
    namespaces: Namespaces, driver: Drivers
) -> None:
    a, b = namespaces.add("a"), namespaces.add("b")
    # An earlier version joined the two pods with one veth pair, straight across.
    veth_across(a, "eth1", b, "eth1")
    for pod in (a, b):
        ip("-n", netns_name(pod), "link", "set", "eth1", "alias", "meshwire:lab/1")
    driver.update(veth_row(a, b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))
    assert pings(a, "10.0.0.2")
    assert links(a)["eth1"]["link_netnsid"] == links(b)["eth1"]["link_netnsid"]


def test_both_ends_named_alike_in_one_netns_is_a_spec_error(
    namespaces: Namespaces, driver: Drivers
) -> None:
    a = namespaces.add("a")
    with pytest.raises(SpecError, match="one name in one netns"):
        driver.update(veth_row(a, a))


def test_ifindexes_that_merely_match_across_netns_do_not_count_as_a_pair(
    namespaces: Namespaces, driver: Drivers, reaper: Reaper
) -> None:
    # ifindexes are per netns: a look-alike in `new_b` can point at the end in `a`
    # (still paired with `old_b`) by ifindex alone, and be pointed at by it.
    a, old_b, new_b, other = (namespaces.add(n) for n in ("a", "b", "b2", "c"))
    driver.update(veth_row(a, old_b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))
    end_a = links(a)["eth1"]
    look_alike = ["eth1", "index", str(end_a["link_index"])]
    far = ["eth1", "index", str(end_a["ifindex"]), "netns", netns_name(other)]
    ip("-n", netns_name(new_b), "link", "add", *look_alike, "type", "veth", "peer", *far)
    ip("-n", netns_name(new_b), "link", "set", "eth1", "alias", "meshwire:lab/1")
    assert links(new_b)["eth1"]["link_index"] == end_a["ifindex"]
    driver.update(veth_row(a, new_b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))
    assert pings(a, "10.0.0.2")
    assert reaper.settle(WAIT)
    assert "eth1" not in links(old_b)
