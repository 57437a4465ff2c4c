"""A pod end's node side in the way of a new one is set aside at once and deleted later.

A restarted pod's old end lives on until the kernel has torn the dead pod's
netns down, and its node side holds the name the new end's node side needs
(names.pod_peer_name); deleting it would make the new end wait 20-27 ms. The
driver renames the node side aside (down, no address, still marked) and its
`Reaper` deletes it, and the old end with it, off the caller's path. The
surviving pod's end is never touched. Here a reaper whose delay is an hour
shows the moment in between; one with no delay shows that every aside end
goes, and a fresh driver's prune pass stands for the next run of a daemon
that crashed in between.
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
    veth_across,
    veth_row,
    wait_until,
)

from meshwire.control.common.queue import WorkQueue
from meshwire.control.links.aside import Reaper
from meshwire.control.links.driver import Drivers, kernel_drivers
from meshwire.control.links.iface_names import aside_name, is_aside, pod_peer_name
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


def driver_with(host: str, reaper: Reaper) -> Drivers:
    return Drivers(kernel_drivers(host_netns=host, reaper=reaper))


def aside_ends(netns: str) -> dict[str, dict[str, object]]:
    return {name: item for name, item in links(netns).items() if is_aside(name)}


def test_the_new_end_is_up_while_the_old_one_waits_aside(
    namespaces: Namespaces, held: Reaper
) -> None:
    # Pod b restarted in a new netns (b2) while its old one lives on: its old
    # end's node side still holds the name.
    host = namespaces.add("host")
    driver = driver_with(host, held)
    a, old_b, new_b = namespaces.add("a"), namespaces.add("b"), namespaces.add("b2")
    driver.update(veth_row(a, old_b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))
    kept = links(a)["eth1"]["ifindex"]
    old_side = links(host)[pod_peer_name("lab", "r2", "eth1")]["ifindex"]
    ip("-n", netns_name(a), "addr", "add", "10.9.9.1/24", "dev", "eth1")  # the NOS's own

    driver.update(veth_row(a, new_b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))

    # The surviving pod's end is as it was, its own address included.
    assert links(a)["eth1"]["ifindex"] == kept
    assert addresses(a, "eth1") == {"10.0.0.1/30", "10.9.9.1/24"}
    assert addresses(new_b, "eth1") == {"10.0.0.2/30"}
    assert pings(a, "10.0.0.2") and pings(new_b, "10.0.0.1")
    # The old node side, not deleted yet: down, renamed, still marked, no address.
    [(name, old)] = aside_ends(host).items()
    assert name == aside_name(int(str(old_side)))
    assert old["ifalias"] == "meshwire:lab/1"
    assert "UP" not in old["flags"]  # type: ignore[operator]
    assert json_addresses(host, name) == []


def json_addresses(netns: str, intf: str) -> list[str]:
    """Every address of `intf`, link-local ones included."""
    out = json.loads(ip("-n", netns_name(netns), "-j", "addr", "show", "dev", intf))
    return [a["local"] for item in out for a in item.get("addr_info", [])]


def test_every_end_set_aside_is_deleted(namespaces: Namespaces) -> None:
    reaper = Reaper(delay=0)
    host = namespaces.add("host")
    driver = driver_with(host, reaper)
    a, b, b2, b3 = (namespaces.add(n) for n in ("a", "b", "b2", "b3"))
    driver.update(veth_row(a, b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))
    driver.update(veth_row(a, b2, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))
    driver.update(veth_row(a, b3, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))
    namespaces.recreate(a)
    driver.update(veth_row(a, b3, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))

    assert reaper.settle(WAIT)
    # Deleting an aside node side took its old pod end along.
    wait_until(lambda: set(links(b)) == set(links(b2)) == {"lo"}, WAIT)
    assert aside_ends(host) == {}
    assert set(links(a)) == set(links(b3)) == {"lo", "eth1"}
    assert pings(a, "10.0.0.2")


def test_a_moved_link_keeps_the_end_that_stayed_and_frees_the_others_name_at_once(
    namespaces: Namespaces, held: Reaper
) -> None:
    # The reconciler's `move`: the row's ends moved (pod b restarted in a new netns).
    host = namespaces.add("host")
    driver = driver_with(host, held)
    a, b, b2 = namespaces.add("a"), namespaces.add("b"), namespaces.add("b2")
    old, row = (veth_row(a, p, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30") for p in (b, b2))
    driver.update(old)
    kept = links(a)["eth1"]["ifindex"]
    driver.move(old, row)
    assert links(a)["eth1"]["ifindex"] == kept
    assert len(aside_ends(host)) == 1
    driver.update(row)  # the name is free: built at once
    assert pings(a, "10.0.0.2")

    assert held.flush(WAIT)
    assert aside_ends(host) == {}
    assert set(links(b)) == {"lo"}
    assert links(a)["eth1"]["ifindex"] == kept
    assert pings(a, "10.0.0.2")


def test_a_removed_link_is_gone_when_delete_returns(namespaces: Namespaces, held: Reaper) -> None:
    host = namespaces.add("host")
    driver = driver_with(host, held)
    a, b = namespaces.add("a"), namespaces.add("b")
    row = veth_row(a, b)
    driver.update(row)
    driver.delete(row)
    assert set(links(a)) == set(links(b)) == {"lo"}
    assert aside_ends(host) == {}


def test_an_aside_end_left_in_a_pod_by_an_earlier_version_is_removed_by_the_next_full_pass(
    namespaces: Namespaces,
) -> None:
    host = namespaces.add("host")
    a, old_b, new_b = namespaces.add("a"), namespaces.add("b"), namespaces.add("b2")
    veth_across(a, "eth1", old_b, "eth1")
    # The daemon died between setting the old end aside and deleting it.
    old = aside_name(int(str(links(a)["eth1"]["ifindex"])))
    ip("-n", netns_name(a), "link", "set", "eth1", "alias", "meshwire:lab/1")
    ip("-n", netns_name(a), "link", "set", "eth1", "name", old)
    ip("-n", netns_name(a), "link", "add", "nos0", "type", "bridge")  # the NOS's own
    row = veth_row(a, new_b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30")

    # The next run: its rows reconciled once, then the full pass prunes.
    driver = Drivers(kernel_drivers(host_netns=host))
    removed = asyncio.run(next_run_prunes(driver, row, [a, new_b]))

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
    host = namespaces.add("host")
    driver = driver_with(host, held)
    a, old_b, new_b = namespaces.add("a"), namespaces.add("b"), namespaces.add("b2")
    driver.update(veth_row(a, old_b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))
    index = int(str(links(host)[pod_peer_name("lab", "r2", "eth1")]["ifindex"]))
    # A foreign interface already holds the aside name: the old side is deleted in place.
    ip("-n", netns_name(host), "link", "add", aside_name(index), "type", "bridge")
    foreign = links(host)[aside_name(index)]
    driver.update(veth_row(a, new_b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30"))
    assert links(host)[aside_name(index)] == foreign
    assert pings(a, "10.0.0.2")
    assert set(links(old_b)) == {"lo"}


def test_an_aside_end_that_lost_its_mark_is_left_alone(
    namespaces: Namespaces, held: Reaper
) -> None:
    host = namespaces.add("host")
    driver = driver_with(host, held)
    a, b = namespaces.add("a"), namespaces.add("b")
    row = veth_row(a, b)
    driver.update(row)
    # a's interface is renamed in the topology: its old end goes, b's stays.
    driver.move(row, veth_row(a, b, uid=1, a_intf="eth2"))
    [name] = aside_ends(host)
    ip("-n", netns_name(host), "link", "set", name, "alias", "")  # someone else's now
    assert held.flush(WAIT)
    assert name in links(host)
    assert "eth1" in links(b)


def test_aside_names_are_unique_per_ifindex_and_never_temporary_names() -> None:
    assert aside_name(0x2A) == "mwold0000002a"
    assert aside_name(2**31 - 1) == "mwold7fffffff"
    assert len(aside_name(2**31 - 1)) <= 15
    assert is_aside("mwold0000002a")
    for name in ("mwold", "mwold0000002", "mwold0000002A", "mw0123456789aa", "xmwold0000002"):
        assert not is_aside(name)
