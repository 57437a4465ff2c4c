"""A pod end whose far pod is gone keeps its interface without carrier, in real netns.

The far pod is deleted or restarting: derivation turns the link's row into a
`detached` row for the surviving pod, and back when the far pod runs again.
The reconciler builds the new row before it removes the old one (a delete
waits out the queue's quiet); the surviving pod's interface keeps its
ifindex, kind and MAC throughout and shows the far end's absence as
NO-CARRIER.
"""

from __future__ import annotations

import dataclasses

import pytest
from links_helpers import (
    Namespaces,
    carrier,
    ip,
    links,
    namespaces,
    needs_root,
    netns_name,
    pings,
    reaper,
    underlay,
    veth_row,
    vxlan_row,
)

from meshwire.control.links import podend
from meshwire.control.links.aside import Reaper
from meshwire.control.links.driver import Drivers, kernel_drivers
from meshwire.control.links.iface_names import Mark
from meshwire.control.tables.links import End, LinkKind, LinkRow

pytestmark = [needs_root, pytest.mark.root]
__all__ = ["namespaces", "reaper"]

WAIT = 30.0


def detached(row: LinkRow, local: End) -> LinkRow:
    """The row derivation gives `local`'s pod while its far pod is not running."""
    far = row.peer if local == row.local else row.local
    return dataclasses.replace(
        row,
        kind=LinkKind.DETACHED,
        local=local,
        peer=End(far.pod, "", far.intf, far.ip),
        peer_node_ip="",
        vni=0,
    )


def identity(netns: str, intf: str = "eth1") -> tuple[object, ...]:
    found = links(netns)[intf]
    return found["ifindex"], found["linkinfo"]["info_kind"], found["address"]


def test_a_same_node_peer_deleted_and_back_leaves_the_survivors_interface_as_it_was(
    namespaces: Namespaces, reaper: Reaper
) -> None:
    host = namespaces.add("host")
    driver = Drivers(kernel_drivers(host_netns=host, reaper=reaper))
    a, b = namespaces.add("a"), namespaces.add("b")
    row = veth_row(a, b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30")
    driver.update(row)
    before = identity(a)

    ip("netns", "del", netns_name(b))  # the far pod is deleted
    alone = detached(row, row.local)
    driver.update(alone)
    driver.delete(row)
    assert identity(a) == before
    assert not carrier(a, "eth1")

    ip("netns", "add", netns_name(b))  # it runs again, in a new netns
    ip("-n", netns_name(b), "link", "set", "lo", "up")
    driver.update(row)
    driver.delete(alone)
    assert identity(a) == before
    assert carrier(a, "eth1") and carrier(b, "eth1")
    assert pings(a, "10.0.0.2")


def test_a_removed_link_takes_its_detached_end_along(
    namespaces: Namespaces, reaper: Reaper
) -> None:
    host = namespaces.add("host")
    driver = Drivers(kernel_drivers(host_netns=host, reaper=reaper))
    a = namespaces.add("a")
    alone = detached(veth_row(a, a, b_intf="eth2"), End("r1", a, "eth1"))
    driver.update(alone)
    assert "eth1" in links(a) and not carrier(a, "eth1")
    driver.delete(alone)
    assert "eth1" not in links(a)


def test_a_cross_node_peer_deleted_and_back_leaves_the_survivors_interface_as_it_was(
    namespaces: Namespaces,
) -> None:
    n1, n2 = underlay(namespaces)
    p1, p2 = namespaces.add("p1"), namespaces.add("p2")
    node1, node2 = Drivers(kernel_drivers(host_netns=n1)), Drivers(kernel_drivers(host_netns=n2))
    row1 = vxlan_row(p1, "10.1.0.1/30", "192.0.2.2")
    row2 = vxlan_row(p2, "10.1.0.2/30", "192.0.2.1")
    node1.update(row1)
    node2.update(row2)
    assert pings(p1, "10.1.0.2")
    before = identity(p1)

    # p2 is deleted: node1 derives a detached row for p1's end (same key: a move).
    node2.delete(row2)
    alone = detached(row1, row1.local)
    node1.move(row1, alone)
    node1.update(alone)
    assert identity(p1) == before
    assert not carrier(p1, "eth1")

    node2.update(row2)
    node1.move(alone, row1)
    node1.update(row1)
    assert identity(p1) == before
    assert carrier(p1, "eth1")
    assert pings(p1, "10.1.0.2")


def test_a_wires_teardown_cannot_take_the_carrier_of_an_end_another_kind_holds(
    namespaces: Namespaces, reaper: Reaper
) -> None:
    # The link left the workers for the kernel's path: the veth row holds the end
    # now, and the old wire's last word (no carrier) must not reach the pod.
    host = namespaces.add("host")
    driver = Drivers(kernel_drivers(host_netns=host, reaper=reaper))
    a, b = namespaces.add("a"), namespaces.add("b")
    row = veth_row(a, b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30")
    driver.update(row)
    mark = Mark(row.namespace, row.uid)
    podend.give_carrier(host, mark, row.local, LinkKind.GRPC, False)
    assert carrier(a, "eth1") and pings(a, "10.0.0.2")
    podend.give_carrier(host, mark, row.local, LinkKind.VETH, False)
    assert not carrier(a, "eth1")
