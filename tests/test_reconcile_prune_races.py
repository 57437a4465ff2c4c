"""A prune pass never takes away what a row wants, even when the row appears mid-pass.

Pruning lists each pod netns and removes marked interfaces no row wants, both
in threads, while the daemon's loop goes on deriving rows and reconciling
them. Found by bench/churn.py: a pod ADDed on a node while its just-restarted
daemon pruned lost an interface its row had just been reconciled with, and
the link stayed down until the full pass a minute later.

Here the driver is paused inside the pass (`FakeDriver` from
reconciler_helpers.py) while the pod's peer is placed, which derives the row
and reconciles it: the interface that was left over from before is adopted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from reconciler_helpers import Pause, Scenario

from meshwire.control.tables.health import State


async def left_over_link(scenario: Scenario) -> None:
    """r1 and r2 placed, their link not wanted yet (not in their Topology yet), and r1's
    end of it left in r1's netns by the daemon's previous run."""
    scenario.cmd_pod("r1", "r2")
    scenario.cmd_place("r1", "/ns/r1")
    scenario.cmd_place("r2", "/ns/r2")
    scenario.cmd_iface("/ns/r1", "eth1", "default/1")
    scenario.cmd_synced()
    await scenario.cmd_settle()
    assert scenario.daemon.reconciler.ends_wanted() == set()


def link_added(scenario: Scenario) -> None:
    scenario.cmd_link("1", "r1:eth1", "r2:eth1")


@contextlib.asynccontextmanager
async def peer_placed_while_paused_in(method: str) -> AsyncIterator[Scenario]:
    """A prune pass over `left_over_link`, paused in the driver's `method` while the link
    is added (its row derived and reconciled), then let finish."""
    scenario = Scenario(method)
    await left_over_link(scenario)
    pause = Pause()
    setattr(scenario.driver, method, pause.around(getattr(scenario.driver, method)))
    try:
        pruning = asyncio.create_task(scenario.cmd_prune())
        await pause.wait_reached()
        link_added(scenario)
        await scenario.cmd_settle()
        assert ("/ns/r1", "eth1") in scenario.daemon.reconciler.ends_wanted()
        pause.go.set()
        await pruning
        await scenario.cmd_settle()
        yield scenario
    finally:
        pause.go.set()
        await scenario.daemon.stop()


async def test_a_row_derived_while_its_netns_is_listed_keeps_its_interface() -> None:
    async with peer_placed_while_paused_in("owned") as scenario:
        assert "remove(/ns/r1 eth1)" not in scenario.driver.log
        assert ("/ns/r1", "eth1") in scenario.driver.kernel


async def test_a_row_derived_while_its_interface_is_removed_gets_it_back() -> None:
    async with peer_placed_while_paused_in("remove") as scenario:
        # The removal went ahead (it had been decided), and the row was reconciled again.
        assert "remove(/ns/r1 eth1)" in scenario.driver.log
        assert ("/ns/r1", "eth1") in scenario.driver.kernel
        assert ("/ns/r2", "eth1") in scenario.driver.kernel


async def test_a_row_whose_interface_a_prune_removed_shows_pending_until_rebuilt() -> None:
    scenario = Scenario("recheck")
    try:
        await left_over_link(scenario)
        link_added(scenario)
        await scenario.cmd_settle()
        reconciler = scenario.daemon.reconciler
        links = reconciler.links
        [key] = [row.key for row in links.values() if row.local.netns == "/ns/r1"]
        assert links.health(key).state is State.DONE
        assert reconciler.recheck("/ns/r1", "eth1")
        assert links.health(key).state is State.PENDING  # until the queued check has run
        await scenario.cmd_settle()
        assert links.health(key).state is State.DONE
        assert not reconciler.recheck("/ns/r9", "eth1")
    finally:
        await scenario.daemon.stop()
