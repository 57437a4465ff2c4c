"""Ownership marks and interface names: pure, no kernel."""

from __future__ import annotations

import pytest

from meshwire.control.links.iface_names import (
    Mark,
    NodeRole,
    Role,
    is_aside,
    node_name,
    parse_mark,
    pod_peer_name,
    temp_name,
)
from meshwire.control.model.name_rules import MAX_INTERFACE_BYTES


def test_mark_round_trips_through_the_alias() -> None:
    mark = Mark("lab-1", 42)
    assert mark.format() == "meshwire:lab-1/42"
    assert parse_mark(mark.format()) == mark
    assert mark.link == "lab-1/42"


@pytest.mark.parametrize(
    "alias", [None, "", "meshwire:", "meshwire:lab", "meshwire:/3", "meshwire:lab/x", "eth1 to r2"]
)
def test_anything_else_in_the_alias_is_no_mark(alias: str | None) -> None:
    assert parse_mark(alias) is None


def test_temporary_names_fit_ifnamsiz_and_are_stable_and_distinct() -> None:
    names = {temp_name(f"ns/{uid}", role) for uid in range(2000) for role in Role}
    assert len(names) == 2000 * len(Role)
    assert all(len(name.encode()) <= MAX_INTERFACE_BYTES for name in names)
    assert temp_name("lab/1", Role.VETH_LOCAL) == temp_name("lab/1", Role.VETH_LOCAL)


def test_node_names_fit_ifnamsiz_and_are_stable_and_distinct_per_role() -> None:
    keys = [f"lab/r{pod}/eth{intf}" for pod in range(100) for intf in range(20)]
    names = {node_name(key, role) for key in keys for role in NodeRole}
    assert len(names) == len(keys) * len(NodeRole)
    assert all(len(name.encode()) == MAX_INTERFACE_BYTES for name in names)
    assert pod_peer_name("lab", "r1", "eth1") == node_name("lab/r1/eth1", NodeRole.POD_PEER)
    assert not any(is_aside(name) for name in names)
