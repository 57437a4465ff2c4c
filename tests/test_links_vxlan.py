"""vxlan links between pods on two nodes; each "node" is a netns of the test's own.

Each node's driver gets its node netns as `host_netns`, as a daemon running in
that node would have it as its own netns. The pod holds a pod end (a veth);
the vxlan device is in the node's netns, stitched to the pod end's node side.
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
    underlay,
    vxlan_row,
)

from meshwire.control.links.driver import Drivers, kernel_drivers
from meshwire.control.links.driver_errors import LinkError, SpecError
from meshwire.control.links.iface_names import NodeRole, node_name, pod_peer_name

pytestmark = [needs_root, pytest.mark.root]
__all__ = ["namespaces"]


def device(node: str, key: str = "lab/7/r1") -> dict[str, object]:
    """The vxlan device of row `key` in the node netns `node`."""
    return links(node)[node_name(key, NodeRole.VXLAN)]


@pytest.fixture
def lab(namespaces: Namespaces) -> tuple[Drivers, Drivers, str, str]:
    n1, n2 = underlay(namespaces)
    p1, p2 = namespaces.add("p1"), namespaces.add("p2")
    node1, node2 = Drivers(kernel_drivers(host_netns=n1)), Drivers(kernel_drivers(host_netns=n2))
    node1.update(vxlan_row(p1, "10.1.0.1/30", "192.0.2.2"))
    node2.update(vxlan_row(p2, "10.1.0.2/30", "192.0.2.1"))
    return node1, node2, p1, p2


def test_pods_on_two_nodes_ping_over_vxlan(
    lab: tuple[Drivers, Drivers, str, str], namespaces: Namespaces
) -> None:
    _, _, p1, p2 = lab
    n1 = f"/var/run/netns/{namespaces.prefix}-n1"
    found = device(n1)
    assert found["linkinfo"]["info_kind"] == "vxlan"
    assert found["linkinfo"]["info_data"]["id"] == 5007
    assert found["linkinfo"]["info_data"]["remote"] == "192.0.2.2"
    assert found["linkinfo"]["info_data"]["port"] == 4789
    assert found["ifalias"] == "meshwire:lab/7"
    assert found["mtu"] == 1400
    pod_end = links(p1)["eth1"]
    assert pod_end["linkinfo"]["info_kind"] == "veth"
    assert pod_end["ifalias"] == "meshwire:lab/7"
    assert pod_end["mtu"] == 1400
    assert pod_peer_name("lab", "r1", "eth1") in links(n1)
    assert pings(p1, "10.1.0.2") and pings(p2, "10.1.0.1")


def test_a_second_update_changes_nothing(
    lab: tuple[Drivers, Drivers, str, str], namespaces: Namespaces
) -> None:
    node1, _, p1, _ = lab
    n1 = f"/var/run/netns/{namespaces.prefix}-n1"
    before = links(p1)["eth1"], device(n1)
    node1.update(vxlan_row(p1, "10.1.0.1/30", "192.0.2.2"))
    assert (links(p1)["eth1"], device(n1)) == before


def test_changed_vni_rebuilds_the_device_behind_the_pod_end(
    lab: tuple[Drivers, Drivers, str, str], namespaces: Namespaces
) -> None:
    node1, node2, p1, p2 = lab
    n1 = f"/var/run/netns/{namespaces.prefix}-n1"
    kept = links(p1)["eth1"]["ifindex"]
    node1.update(vxlan_row(p1, "10.1.0.1/30", "192.0.2.2", vni=6001))
    node2.update(vxlan_row(p2, "10.1.0.2/30", "192.0.2.1", vni=6001))
    assert device(n1)["linkinfo"]["info_data"]["id"] == 6001
    assert pings(p1, "10.1.0.2")
    assert links(p1)["eth1"]["ifindex"] == kept


def test_changed_remote_rebuilds_the_device(
    lab: tuple[Drivers, Drivers, str, str], namespaces: Namespaces
) -> None:
    node1, _, p1, _ = lab
    n1 = f"/var/run/netns/{namespaces.prefix}-n1"
    node1.update(vxlan_row(p1, "10.1.0.1/30", "192.0.2.77"))
    assert device(n1)["linkinfo"]["info_data"]["remote"] == "192.0.2.77"


def test_bad_remote_is_a_spec_error(lab: tuple[Drivers, Drivers, str, str]) -> None:
    node1, _, p1, _ = lab
    with pytest.raises(SpecError, match="peer_node_ip 'node-b'"):
        node1.update(vxlan_row(p1, "10.1.0.1/30", "node-b"))


def test_delete_is_idempotent(
    lab: tuple[Drivers, Drivers, str, str], namespaces: Namespaces
) -> None:
    node1, _, p1, _ = lab
    n1 = f"/var/run/netns/{namespaces.prefix}-n1"
    row = vxlan_row(p1, "10.1.0.1/30", "192.0.2.2")
    node1.delete(row)
    assert "eth1" not in links(p1)
    assert not {name for name in links(n1) if name.startswith("mn")}
    node1.delete(row)


def test_a_vni_held_by_a_device_meshwire_did_not_create_is_a_spec_error_naming_it(
    namespaces: Namespaces,
) -> None:
    n1, _ = underlay(namespaces)
    p1 = namespaces.add("p1")
    ip(
        "-n",
        netns_name(n1),
        "link",
        "add",
        "other0",
        "type",
        "vxlan",
        "id",
        "6001",
        "dstport",
        "4789",
        "remote",
        "192.0.2.9",
    )
    node1 = Drivers(kernel_drivers(host_netns=n1))
    with pytest.raises(
        SpecError, match=r"VNI 6001 .* held by vxlan device 'other0'.* did not create"
    ):
        node1.update(vxlan_row(p1, "10.1.0.1/30", "192.0.2.2", vni=6001))
    assert not carrier(p1, "eth1")
    assert "other0" in ip("-n", netns_name(n1), "link", "show", "other0")


def test_a_vni_held_by_meshwires_own_old_device_is_transient(
    lab: tuple[Drivers, Drivers, str, str], namespaces: Namespaces
) -> None:
    node1, _, _, _ = lab
    p3 = namespaces.add("p3")
    row = vxlan_row(p3, "10.1.0.5/30", "192.0.2.2")
    with pytest.raises(LinkError, match="EEXIST"):
        node1.update(
            dataclasses.replace(row, uid=8, local=dataclasses.replace(row.local, pod="r3"))
        )
