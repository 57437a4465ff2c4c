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
from meshwire.control.tables.health import State


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


async def test_a_rows_verdict_is_told_to_the_watchers_of_its_pods_only() -> None:
    # A CNI ADD waits on its pod's health and looks again as soon as a row of
    # the pod is realised; other pods' ADDs sleep on.
    scenario = placed_pair("verdict told")
    pause = Pause()
    scenario.driver.update = pause.around(scenario.driver.update)  # type: ignore[method-assign]
    links = scenario.daemon.links
    on_r1: list[bool] = []
    on_other: list[bool] = []
    stops = [
        links.watch_health(lambda pods, errors: on_r1.append(errors), "default/r1"),
        links.watch_health(lambda pods, errors: on_other.append(errors), "default/elsewhere"),
    ]
    try:
        scenario.cmd_synced()
        await pause.wait_reached()  # link 1's first update is under way
        [key] = links.keys()
        on_r1.clear()
        await asyncio.sleep(0)
        assert on_r1 == []

        pause.go.set()
        await scenario.cmd_settle()
        assert links.health(key).state is State.DONE
        assert on_r1 == [False]  # done: neither is nor replaces an error
        # A check asked for is told at once, before any await.
        scenario.daemon.reconciler.verify([key])
        assert on_r1 == [False, False] and links.health(key).state is State.PENDING
        await scenario.cmd_settle()
        assert on_other == []
    finally:
        for stop in stops:
            stop()
        pause.go.set()
        await scenario.daemon.stop()


async def test_a_derivation_is_told_to_the_watchers_of_the_pods_it_derived() -> None:
    # A CNI ADD whose pod has a topology change not yet derived looks again as
    # soon as the derive loop applied it; a change to another pod owes it nothing.
    scenario = Scenario("derivation told")
    scenario.cmd_pod("r1", "r2")
    scenario.cmd_synced()
    desired, links = scenario.daemon.desired, scenario.daemon.links
    told: list[bool] = []
    stop = links.watch_health(lambda pods, errors: told.append(errors), "default/r3")
    try:
        # A change the derive loop has not taken yet.
        scenario.daemon.topologies.upsert(Topology("default", "r3"))
        assert desired.owes("default/r3") and not desired.owes("default/r1")
        assert told == []

        desired.step()
        assert told == [True]
        assert not desired.owes("default/r3")
    finally:
        stop()
        await scenario.daemon.stop()
