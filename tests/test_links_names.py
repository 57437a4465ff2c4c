"""Ownership marks and interface names: pure, no kernel."""

from __future__ import annotations

import pytest

from meshwire.control.links.names import (
    MAX_IFNAME_BYTES,
    Mark,
    Role,
    ifname_problem,
    parse_mark,
    temp_name,
)


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
    assert all(len(name.encode()) <= MAX_IFNAME_BYTES for name in names)
    assert temp_name("lab/1", Role.VETH_LOCAL) == temp_name("lab/1", Role.VETH_LOCAL)


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("eth1", True),
        ("e" * 15, True),
        ("e" * 16, False),
        ("", False),
        ("a/b", False),
        ("a b", False),
        ("..", False),
        ("Ethernet1:1", False),
    ],
)
def test_interface_names_the_kernel_would_refuse(name: str, ok: bool) -> None:
    assert (ifname_problem(name) is None) is ok
