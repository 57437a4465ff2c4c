"""Pruning's view of a netns: only interfaces meshwire marked are listed or removed."""

from __future__ import annotations

import pytest
from links_helpers import Namespaces, ip, links, namespaces, needs_root, netns_name, veth_row

from meshwire.control.links.driver import Drivers, kernel_drivers
from meshwire.control.links.iface_names import Mark

pytestmark = [needs_root, pytest.mark.root]
__all__ = ["namespaces"]


@pytest.fixture
def pod_with_foreigners(namespaces: Namespaces) -> tuple[Drivers, str]:
    driver = Drivers(kernel_drivers(host_netns=namespaces.add("host")))
    a, b = namespaces.add("a"), namespaces.add("b")
    driver.update(veth_row(a, b))
    ip("-n", netns_name(a), "link", "add", "nos0", "type", "bridge")
    ip("-n", netns_name(a), "link", "add", "nos1", "type", "bridge")
    ip("-n", netns_name(a), "link", "set", "nos1", "alias", "meshnet-was-here")
    return driver, a


def test_owned_lists_only_marked_interfaces(pod_with_foreigners: tuple[Drivers, str]) -> None:
    driver, a = pod_with_foreigners
    owned = driver.owned(a)
    assert [(o.name, o.mark, o.kind) for o in owned] == [("eth1", Mark("lab", 1), "veth")]
    assert owned[0].ifindex == links(a)["eth1"]["ifindex"]


def test_remove_deletes_marked_and_never_unmarked(pod_with_foreigners: tuple[Drivers, str]) -> None:
    driver, a = pod_with_foreigners
    for name in ("nos0", "nos1", "lo"):
        driver.remove(a, name)
    assert {"nos0", "nos1", "lo"} <= set(links(a))
    driver.remove(a, "eth1")
    assert "eth1" not in links(a)
    driver.remove(a, "eth1")


def test_a_vanished_netns_has_nothing_owned_and_nothing_to_remove(
    namespaces: Namespaces,
) -> None:
    driver = Drivers(kernel_drivers())
    gone = f"/var/run/netns/{namespaces.prefix}-gone"
    assert driver.owned(gone) == []
    driver.remove(gone, "eth1")
