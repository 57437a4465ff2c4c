"""The initial reconciliation completes even when its last pending rows go away.

Readiness (`/readyz`, CNI STATUS) waits for every row that existed when the
daemon synced to be attempted once. A row that leaves the table first (its
link edited out, its pod moved away while the daemon started) is no longer
waited for, and that must be noticed when it leaves, not at the next status
change of some other row: found by bench/churn.py, where a daemon restarted
during churn stayed not ready for a minute, until an unrelated event.
"""

from __future__ import annotations

import asyncio

from reconciler_helpers import Pause, Scenario

from meshwire.control.model.topology import Topology
from meshwire.control.tables.links import State


def three_pods_two_links(scenario: Scenario) -> None:
    scenario.cmd_pod("r1", "r2", "r3")
    scenario.cmd_link("1", "r1:eth1", "r2:eth1")
    scenario.cmd_link("2", "r1:eth2", "r3:eth1")
    for pod in ("r1", "r2", "r3"):
        scenario.cmd_place(pod, f"/ns/{pod}")


async def test_a_row_removed_while_its_first_update_runs_does_not_hold_readiness() -> None:
    scenario = Scenario("in flight")
    three_pods_two_links(scenario)
    pause = Pause()
    scenario.driver.update = pause.around(scenario.driver.update)  # type: ignore[method-assign]
    try:
        scenario.cmd_synced()
        await pause.wait_reached()  # link 1's first update is under way (one worker)
        scenario.cmd_unlink("1")
        scenario.cmd_unlink("2")
        pause.go.set()
        await scenario.cmd_settle()

        assert scenario.daemon.links.keys() == []
        assert scenario.daemon.reconciler.initial_done.is_set()
    finally:
        pause.go.set()
        await scenario.daemon.stop()


def placed_pair(name: str) -> Scenario:
    """Pods r1 and r2 on this node, placed, with one link between them."""
    scenario = Scenario(name)
    scenario.cmd_pod("r1", "r2")
    scenario.cmd_link("1", "r1:eth1", "r2:eth1")
    for pod in ("r1", "r2"):
        scenario.cmd_place(pod, f"/ns/{pod}")
    return scenario


async def test_a_status_change_wakes_those_waiting_on_that_row_only() -> None:
    # A CNI ADD waits on its pod's rows and looks again as soon as one is
    # realised, instead of waiting out its poll; other pods' ADDs sleep on.
    scenario = placed_pair("status wake")
    pause = Pause()
    scenario.driver.update = pause.around(scenario.driver.update)  # type: ignore[method-assign]
    reconciler = scenario.daemon.reconciler
    try:
        scenario.cmd_synced()
        await pause.wait_reached()  # link 1's first update is under way
        [key] = scenario.daemon.links.keys()
        on_link = reconciler.status_change([key])
        on_other = reconciler.status_change(["default/elsewhere"])
        await asyncio.sleep(0)
        assert not on_link.done()

        pause.go.set()
        await asyncio.wait_for(on_link, 30)
        assert reconciler.links.status(key).state is State.DONE
        await scenario.cmd_settle()
        assert not on_other.done()
        on_other.cancel()
    finally:
        pause.go.set()
        await scenario.daemon.stop()


async def test_a_derivation_step_wakes_those_waiting_for_pending_changes() -> None:
    # A CNI ADD whose pod has a topology change not yet derived looks again as
    # soon as the derive loop applied it, instead of waiting out its poll.
    scenario = Scenario("step wake")
    scenario.cmd_pod("r1", "r2")
    scenario.cmd_synced()
    desired = scenario.daemon.desired
    try:
        # A change the derive loop has not taken yet.
        scenario.daemon.topologies.upsert(Topology("default", "r3"))
        assert desired.pending()
        woken = desired.stepped()
        cancelled = desired.stepped()
        for _ in range(10):
            await asyncio.sleep(0)
        assert not woken.done()
        cancelled.cancel()
        await asyncio.gather(cancelled, return_exceptions=True)

        desired.step()
        await asyncio.wait_for(woken, 30)
        assert not desired.pending()
        assert cancelled.cancelled()
        # A step that runs before the waiter is first awaited still wakes it.
        scenario.daemon.topologies.upsert(Topology("default", "r4"))
        early = desired.stepped()
        desired.step()
        assert early.done()
    finally:
        await scenario.daemon.stop()


async def test_a_status_set_before_the_waiter_is_awaited_still_wakes_it() -> None:
    # The CNI ADD asks for the wake-up, then waits in a task of its own: a pass
    # that completes in between (its callback runs first) must not be missed,
    # or the ADD sleeps out its poll (up to 50 ms) with its links already up.
    scenario = placed_pair("early wake")
    reconciler = scenario.daemon.reconciler
    try:
        scenario.cmd_synced()
        await scenario.cmd_settle()
        [key] = scenario.daemon.links.keys()
        woken = reconciler.status_change([key])
        left = reconciler.status_change([key])
        reconciler.verify([key])  # sets the row pending at once
        assert woken.done() and left.done()
        cancelled = reconciler.status_change([key, "default/elsewhere"])
        cancelled.cancel()
        await asyncio.sleep(0)
        await scenario.cmd_settle()
        assert reconciler.links.status(key).state is State.DONE
        assert not reconciler._status_waiters  # resolved or cancelled, none is kept
    finally:
        await scenario.daemon.stop()
