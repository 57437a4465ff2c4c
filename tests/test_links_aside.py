"""A veth end in the way of a new pair is set aside at once and deleted later.

A restarted pod's peer still holds its end of the old pair until the kernel
has torn the dead pod's netns down, and deleting that end would make the new
pair wait 20-27 ms. The driver renames it aside (down, no address, still
marked) and its `Reaper` deletes it off the caller's path. Here a reaper whose
delay is an hour shows the moment in between; one with no delay shows that
every aside end goes, and a fresh driver's prune pass stands for the next run
of a daemon that crashed in between.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from links_helpers import (
    Namespaces,
    addresses,
    ip,
    links,
    namespaces,
    needs_root,
    netns_name,
    pings,
    veth_row,
    wait_until,
)

from meshwire.control.common.queue import WorkQueue
from meshwire.control.links.aside import Reaper
from meshwire.control.links.driver import Drivers, kernel_drivers
from meshwire.control.links.names import aside_name, is_aside
from meshwire.control.reconcile.prune import prune
from meshwire.control.reconcile.reconciler import LinkReconciler
from meshwire.control.tables.links import LinkRow, new_links_table

pytestmark = [needs_root, pytest.mark.root]
__all__ = ["namespaces"]

HOUR = 3600.0
WAIT = 30.0


@pytest.fixture
def held() -> Iterator[Reaper]:
    """A reaper that deletes nothing for an hour: what was set aside stays aside (until
    the teardown's flush)."""
    reaper = Reaper(delay=HOUR)
    try:
        yield reaper
    finally:
        reaper.flush(WAIT)


def driver_with(namespaces: Namespaces, reaper: Reaper) -> Drivers:
    return Drivers(kernel_drivers(host_netns=namespaces.add("host"), reaper=reaper))


def aside_ends(netns: str) -> dict[str, dict[str, object]]:
    return {name: item for name, item in links(netns).items() if is_aside(name)}


def test_the_new_pair_is_up_while_the_old_end_waits_aside(
    namespaces: Namespaces, held: Reaper
) -> None:
    # Pod b restarted in a new netns (b2) while its old one lives on: a still
    # holds the old end, paired with b, under the link's name.
    driver = driver_with(namespaces, held)
    a, old_b, new_b = namespaces.add("a"), namespaces.add("b"), namespaces.add("b2")
    driver.update(veth_row(a, old_b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))
    old_index = links(a)["eth1"]["ifindex"]
    ip("-n", netns_name(a), "addr", "add", "10.9.9.1/24", "dev", "eth1")  # the NOS's own

    driver.update(veth_row(a, new_b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))

    assert links(a)["eth1"]["ifindex"] != old_index
    assert links(a)["eth1"]["ifalias"] == links(new_b)["eth1"]["ifalias"] == "meshwire:lab/1"
    assert addresses(a, "eth1") == {"10.0.0.1/30"}
    assert addresses(new_b, "eth1") == {"10.0.0.2/30"}
    assert pings(a, "10.0.0.2") and pings(new_b, "10.0.0.1")
    # The old end, not deleted yet: down, renamed, still marked, no address at all.
    [(name, old)] = aside_ends(a).items()
    assert name == aside_name(int(str(old_index)))
    assert old["ifindex"] == old_index and old["ifalias"] == "meshwire:lab/1"
    assert "UP" not in old["flags"]  # type: ignore[operator]
    assert json_addresses(a, name) == []


def json_addresses(netns: str, intf: str) -> list[str]:
    """Every address of `intf`, link-local ones included."""
    out = json.loads(ip("-n", netns_name(netns), "-j", "addr", "show", "dev", intf))
    return [a["local"] for item in out for a in item.get("addr_info", [])]


def test_every_end_set_aside_is_deleted(namespaces: Namespaces) -> None:
    reaper = Reaper(delay=0)
    driver = driver_with(namespaces, reaper)
    a, b, b2, b3 = (namespaces.add(n) for n in ("a", "b", "b2", "b3"))
    row = veth_row(a, b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30")
    driver.update(row)
    driver.update(veth_row(a, b2, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))
    driver.update(veth_row(a, b3, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))
    namespaces.recreate(a)  # the other pod restarts too: b3 holds the old end now
    driver.update(veth_row(a, b3, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))

    assert reaper.settle(WAIT)
    # Deleting an aside end took its old peer along (b and b2 kept theirs until
    # then); those in a's old netns may instead go with it, as the kernel tears it down.
    wait_until(lambda: set(links(b)) == set(links(b2)) == {"lo"}, WAIT)
    for netns in (a, b, b2, b3):
        assert aside_ends(netns) == {}
    assert set(links(a)) == set(links(b3)) == {"lo", "eth1"}
    assert pings(a, "10.0.0.2")


def test_a_moved_link_frees_both_names_at_once_and_its_old_ends_go_later(
    namespaces: Namespaces, held: Reaper
) -> None:
    # The reconciler's `move`: the row's ends moved (a pod restarted in a new netns).
    driver = driver_with(namespaces, held)
    a, b, b2 = namespaces.add("a"), namespaces.add("b"), namespaces.add("b2")
    old, row = (veth_row(a, p, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30") for p in (b, b2))
    driver.update(old)
    driver.move(old, row)
    assert "eth1" not in links(a) and "eth1" not in links(b)
    assert len(aside_ends(a)) == len(aside_ends(b)) == 1
    driver.update(row)  # the names are free: built at once
    assert pings(a, "10.0.0.2")

    assert held.flush(WAIT)
    assert aside_ends(a) == aside_ends(b) == {}
    assert set(links(b)) == {"lo"}
    assert set(links(a)) == set(links(b2)) == {"lo", "eth1"}
    assert pings(a, "10.0.0.2")


def test_a_removed_link_is_gone_when_delete_returns(namespaces: Namespaces, held: Reaper) -> None:
    driver = driver_with(namespaces, held)
    a, b = namespaces.add("a"), namespaces.add("b")
    row = veth_row(a, b)
    driver.update(row)
    driver.delete(row)
    assert set(links(a)) == set(links(b)) == {"lo"}


def test_an_aside_end_left_by_a_crash_is_removed_by_the_next_full_pass(
    namespaces: Namespaces,
) -> None:
    a, old_b, new_b = namespaces.add("a"), namespaces.add("b"), namespaces.add("b2")
    Drivers(kernel_drivers()).update(veth_row(a, old_b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))
    # The daemon died between setting the old end aside and deleting it.
    old = aside_name(int(str(links(a)["eth1"]["ifindex"])))
    ip("-n", netns_name(a), "link", "set", "eth1", "down")
    ip("-n", netns_name(a), "link", "set", "eth1", "name", old)
    ip("-n", netns_name(a), "link", "add", "nos0", "type", "bridge")  # the NOS's own
    row = veth_row(a, new_b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30")

    # The next run: its rows reconciled once, then the full pass prunes.
    removed = asyncio.run(next_run_prunes(Drivers(kernel_drivers()), row, [a, new_b]))

    assert removed == 1
    assert aside_ends(a) == {}
    assert set(links(a)) == {"lo", "eth1", "nos0"}
    assert set(links(old_b)) == {"lo"}
    assert pings(a, "10.0.0.2")


async def next_run_prunes(driver: Drivers, row: LinkRow, netns: list[str]) -> int:
    links_table = new_links_table()
    links_table.upsert(row.key, row)
    links_table.mark_initialized()
    reconciler = LinkReconciler(links_table, driver, WorkQueue(debounce=0))
    running = asyncio.create_task(reconciler.run())
    try:
        await asyncio.wait_for(reconciler.initial_done.wait(), WAIT)
        return await prune(reconciler, driver, netns)
    finally:
        # As the daemon stops it: close (no driver call starts after it), then cancel.
        reconciler.close()
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


def test_nothing_foreign_is_touched(namespaces: Namespaces, held: Reaper) -> None:
    driver = driver_with(namespaces, held)
    a, old_b, new_b = namespaces.add("a"), namespaces.add("b"), namespaces.add("b2")
    driver.update(veth_row(a, old_b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))
    index = int(str(links(a)["eth1"]["ifindex"]))
    # A foreign interface already holds the aside name: the old end is deleted in place.
    ip("-n", netns_name(a), "link", "add", aside_name(index), "type", "bridge")
    foreign = links(a)[aside_name(index)]
    driver.update(veth_row(a, new_b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))
    assert links(a)[aside_name(index)] == foreign
    assert pings(a, "10.0.0.2")
    assert set(links(old_b)) == {"lo"}


def test_an_aside_end_that_lost_its_mark_is_left_alone(
    namespaces: Namespaces, held: Reaper
) -> None:
    driver = driver_with(namespaces, held)
    a, b = namespaces.add("a"), namespaces.add("b")
    row = veth_row(a, b)
    driver.update(row)
    driver.move(row, veth_row(a, b, uid=1, a_intf="eth2"))
    [name] = aside_ends(a)
    ip("-n", netns_name(a), "link", "set", name, "alias", "")  # someone else's now
    [b_name] = aside_ends(b)
    ip("-n", netns_name(b), "link", "set", b_name, "alias", "")
    assert held.flush(WAIT)
    assert name in links(a) and b_name in links(b)
    assert driver.owned(a) == driver.owned(b) == []


def test_aside_names_are_unique_per_ifindex_and_never_temporary_names() -> None:
    assert aside_name(0x2A) == "mwold0000002a"
    assert aside_name(2**31 - 1) == "mwold7fffffff"
    assert len(aside_name(2**31 - 1)) <= 15
    assert is_aside("mwold0000002a")
    for name in ("mwold", "mwold0000002", "mwold0000002A", "mw0123456789aa", "xmwold0000002"):
        assert not is_aside(name)
