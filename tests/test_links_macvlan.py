"""macvlan links (`peer_pod: localhost`): a pod reaching an interface of its node.

The kernel here has no dummy driver, so the "host interface" is one end of a veth
whose other end sits in an "outside" netns, which lets traffic be checked too.
"""

from __future__ import annotations

import pytest
from links_helpers import (
    Namespaces,
    ip,
    links,
    macvlan_row,
    namespaces,
    needs_root,
    netns_name,
    pings,
    veth_across,
)

from meshwire.control.links.driver import Drivers, kernel_drivers
from meshwire.control.links.driver_errors import SpecError

pytestmark = [needs_root, pytest.mark.root]
__all__ = ["namespaces"]


@pytest.fixture
def node(namespaces: Namespaces) -> tuple[Drivers, str, str]:
    host, outside = namespaces.add("node"), namespaces.add("out")
    veth_across(host, "ens5", outside, "wire")
    ip("-n", netns_name(host), "link", "set", "ens5", "up")
    ip("-n", netns_name(outside), "addr", "add", "10.2.0.9/24", "dev", "wire")
    ip("-n", netns_name(outside), "link", "set", "wire", "up")
    return Drivers(kernel_drivers(host_netns=host)), host, outside


def test_pod_reaches_the_host_interface(
    namespaces: Namespaces, node: tuple[Drivers, str, str]
) -> None:
    driver, host, _ = node
    pod = namespaces.add("p")
    driver.update(macvlan_row(pod, "ens5", "10.2.0.1/24"))
    device = links(pod)["eth3"]
    assert device["linkinfo"]["info_kind"] == "macvlan"
    assert device["linkinfo"]["info_data"]["mode"] == "bridge"
    assert device["ifalias"] == "meshwire:lab/9"
    assert "UP" in device["flags"]
    assert pings(pod, "10.2.0.9")
    driver.update(macvlan_row(pod, "ens5", "10.2.0.1/24"))
    assert links(pod)["eth3"] == device
    assert "ens5" in links(host)


def test_missing_host_interface_is_a_spec_error_naming_it(
    namespaces: Namespaces, node: tuple[Drivers, str, str]
) -> None:
    driver, host, _ = node
    pod = namespaces.add("p")
    with pytest.raises(SpecError) as caught:
        driver.update(macvlan_row(pod, "ens9"))
    assert "'ens9'" in str(caught.value) and host in str(caught.value)
    assert "eth3" not in links(pod)


def test_delete_is_idempotent_and_spares_the_host_interface(
    namespaces: Namespaces, node: tuple[Drivers, str, str]
) -> None:
    driver, host, _ = node
    pod = namespaces.add("p")
    row = macvlan_row(pod, "ens5", "10.2.0.1/24")
    driver.update(row)
    driver.delete(row)
    driver.delete(row)
    assert "eth3" not in links(pod)
    assert "ens5" in links(host)
