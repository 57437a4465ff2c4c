"""What the guard passes to the link driver, and what it refuses (netns_guard.py)."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import pytest

from meshwire.control.daemon.netns_guard import GuardedDriver
from meshwire.control.links.driver import OwnedInterface
from meshwire.control.links.driver_errors import SpecError
from meshwire.control.tables.links import End, LinkKind, LinkRow


class Inner:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def update(self, row: LinkRow) -> None:
        self.calls.append(f"update {row.key}")

    def delete(self, row: LinkRow, keep: Collection[tuple[str, str]] = ()) -> None:
        self.calls.append(f"delete {row.key}")

    def move(self, previous: LinkRow, row: LinkRow) -> None:
        self.calls.append(f"move {row.key}")

    def owned(self, netns: str) -> list[OwnedInterface]:
        self.calls.append(f"owned {netns}")
        return []

    def remove(self, netns: str, ifname: str) -> None:
        self.calls.append(f"remove {netns} {ifname}")


class Authority:
    def __init__(self, handed: set[str], released: set[str] | None = None) -> None:
        self._handed, self._released = handed, released or set()

    def handed(self, netns: str) -> bool:
        return netns in self._handed

    def was_handed(self, netns: str) -> bool:
        return netns in self._handed or netns in self._released


def veth(a: str, b: str) -> LinkRow:
    return LinkRow("lab", 1, LinkKind.VETH, End("r1", a, "eth1"), End("r2", b, "eth1"), 1500)


def guarded(authority: Authority) -> tuple[GuardedDriver, Inner, list[str]]:
    inner, refused = Inner(), []
    driver = GuardedDriver(inner, refused.append)
    driver.authority = authority
    return driver, inner, refused


def existing(tmp_path: Path, name: str) -> str:
    path = tmp_path / name
    path.touch()
    return str(path)


def test_a_link_is_built_only_when_both_pod_ends_are_handed(tmp_path: Path) -> None:
    a, b, victim = (existing(tmp_path, n) for n in ("a", "b", "victim"))
    driver, inner, refused = guarded(Authority({a, b}))
    driver.update(veth(a, b))
    with pytest.raises(SpecError, match="no CNI ADD on this node put pod lab/r2"):
        driver.update(veth(a, victim))
    assert inner.calls == ["update lab/1"]
    assert refused == ["build"]


def test_a_clear_acts_in_handed_released_or_gone_namespaces_only(tmp_path: Path) -> None:
    a, old, victim = (existing(tmp_path, n) for n in ("a", "old", "victim"))
    gone = str(tmp_path / "gone")
    driver, inner, refused = guarded(Authority({a}, {old}))
    driver.delete(veth(a, old))
    driver.delete(veth(a, gone))  # the peer's netns was torn down: its state still goes
    driver.delete(veth(a, victim))
    driver.move(veth(victim, a), veth(a, old))
    assert inner.calls == ["delete lab/1", "delete lab/1"]
    assert refused == ["clear", "clear"]


def test_the_pruner_lists_and_removes_only_in_namespaces_once_handed(tmp_path: Path) -> None:
    a, victim = existing(tmp_path, "a"), existing(tmp_path, "victim")
    driver, inner, refused = guarded(Authority({a}))
    assert driver.owned(victim) == []
    driver.remove(victim, "eth1")
    driver.owned(a)
    driver.remove(a, "eth1")
    assert inner.calls == [f"owned {a}", f"remove {a} eth1"]
    assert refused == ["clear", "clear"]


def test_nothing_is_vouched_for_before_the_authority_is_set(tmp_path: Path) -> None:
    a = existing(tmp_path, "a")
    inner, refused = Inner(), []
    driver = GuardedDriver(inner, refused.append)
    with pytest.raises(SpecError):
        driver.update(veth(a, a))
    assert inner.calls == [] and refused == ["build"]
