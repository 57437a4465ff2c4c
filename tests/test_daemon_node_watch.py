"""Which nodes are gone: the Node objects' addresses, as the node watch reads them."""

from __future__ import annotations

from typing import Any

from meshwire.control.daemon.node_watch import NodeWatch


def node(name: str, *addresses: tuple[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {"addresses": [{"type": t, "address": a} for t, a in addresses]},
    }


A = node("a", ("InternalIP", "10.0.0.1"), ("Hostname", "a"))
B = node("b", ("InternalIP", "10.0.0.2"))
C6 = node("c", ("InternalIP", "2001:db8::0:3"))


class Changes:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def test_no_node_is_gone_before_the_first_list() -> None:
    watch = NodeWatch("10.0.0.1", Changes())
    assert not watch.gone("10.0.0.9")


def test_an_address_no_node_has_is_gone_and_a_deleted_node_goes_with_its_addresses() -> None:
    changes = Changes()
    watch = NodeWatch("10.0.0.1", changes)
    watch.listed([A, B, C6])
    assert changes.count == 1
    assert not watch.gone("10.0.0.2")
    assert not watch.gone("2001:db8::3")  # compared in one spelling
    assert watch.gone("10.0.0.9")
    watch.changed("DELETED", B)
    assert watch.gone("10.0.0.2")
    assert changes.count == 2
    watch.changed("ADDED", B)  # the node registered again
    assert not watch.gone("10.0.0.2")
    assert changes.count == 3


def test_a_change_that_moves_no_address_calls_nobody() -> None:
    changes = Changes()
    watch = NodeWatch("10.0.0.1", changes)
    watch.listed([A, B])
    watch.changed("MODIFIED", B)  # a heartbeat: the same addresses
    assert changes.count == 1


def test_when_this_nodes_address_is_no_nodes_nothing_is_gone() -> None:
    """The daemon's node_ip is then not how the cluster names its nodes: following
    them would detach every link."""
    watch = NodeWatch("192.0.2.7", Changes())
    watch.listed([A, B])
    assert not watch.gone("10.0.0.9")
    assert not watch.gone("10.0.0.2")


def test_objects_without_a_name_or_addresses_are_read_as_nothing() -> None:
    watch = NodeWatch("10.0.0.1", Changes())
    watch.listed([A, {"metadata": {}}, "not an object", node("d")])
    assert watch.gone("10.0.0.2")
    assert not watch.gone("10.0.0.1")
