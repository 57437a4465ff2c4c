"""A daemon that stops leaves its links as they are: after close, no driver call starts.

The daemon closes its link reconciler first thing on shutdown (SIGTERM), while
rows may be queued and a driver call may be in flight (the Cilium seed's "no
action after close"). The call in flight finishes; nothing queued is started,
neither an update nor a delete, so nothing the pods use is torn down and
nothing half-built is begun.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from reconciler_helpers import Pause, Scenario

# Bound on the reconciler's own stop once the held call is let go: never a timing check.
STOP_LIMIT = 10.0
# Event loop turns given to the workers after the held call ended.
LOOP_TURNS = 50


async def built(scenario: Scenario) -> None:
    """r1..r4 placed; links 1 (r1-r2), 2 (r1-r3) and 3 (r3-r4) built."""
    scenario.cmd_pod("r1", "r2", "r3", "r4")
    scenario.cmd_link("1", "r1:eth1", "r2:eth1")
    scenario.cmd_link("2", "r1:eth2", "r3:eth1")
    scenario.cmd_link("3", "r3:eth2", "r4:eth1")
    for pod in ("r1", "r2", "r3", "r4"):
        scenario.cmd_place(pod, f"/ns/{pod}")
    scenario.cmd_synced()
    await scenario.cmd_settle()
    scenario.expect("log", ["update(default/1)", "update(default/2)", "update(default/3)"])


def kernel(scenario: Scenario) -> dict[tuple[str, str], tuple[str, int]]:
    return {key: (found.mark, found.ifindex) for key, found in scenario.driver.kernel.items()}


async def until(condition: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STOP_LIMIT
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {STOP_LIMIT}s waiting for {what}")
        await asyncio.sleep(0.002)


async def close_and_let_go(scenario: Scenario, pause: Pause) -> None:
    """Close the reconciler, release the held call and let the loop run: a worker free
    again takes its next key at once, so a call that could start has started. Then
    cancel as the daemon's shutdown does and wait until every worker has ended."""
    queue = scenario.daemon.queue
    scenario.daemon.reconciler.close()
    pause.go.set()
    await until(lambda: queue.in_flight == 0, "the held call to end")
    for _ in range(LOOP_TURNS):
        await asyncio.sleep(0)
    scenario.daemon.task.cancel()
    async with asyncio.timeout(STOP_LIMIT):
        await asyncio.gather(scenario.daemon.task, return_exceptions=True)


async def test_closed_with_rows_queued_the_call_in_flight_finishes_and_no_other_starts() -> None:
    scenario = Scenario("closed while busy")
    await built(scenario)
    before = kernel(scenario)
    pause = Pause()
    scenario.driver.update = pause.around(scenario.driver.update)  # type: ignore[method-assign]
    try:
        scenario.cmd_link("4", "r2:eth2", "r4:eth2")
        await pause.wait_reached()  # link 4's update is in the driver (one worker)
        # Queued behind it: a new link, a link edited out, a link moved to a new netns.
        scenario.cmd_link("5", "r2:eth3", "r3:eth3")
        scenario.cmd_unlink("3")
        scenario.cmd_place("r2", "/ns/r2-new")
        # Links 5, 3 and 1 (r2 moved) wait behind it.
        await until(lambda: scenario.daemon.queue.depth >= 3, "three keys queued")

        await close_and_let_go(scenario, pause)

        scenario.expect("log", ["update(default/4)"])
        after = kernel(scenario)
        # Nothing was deleted (link 3 is still there) and only link 4's ends are new.
        assert {key: after[key] for key in before} == before
        assert sorted(set(after) - set(before)) == [("/ns/r2", "eth2"), ("/ns/r4", "eth2")]
    finally:
        pause.go.set()
        await scenario.close()


async def test_closed_while_a_moved_link_is_cleared_the_rebuild_does_not_start() -> None:
    scenario = Scenario("closed between clear and build")
    await built(scenario)
    pause = Pause()
    scenario.driver.delete = pause.around(scenario.driver.delete)  # type: ignore[method-assign]
    try:
        # r4 restarts in a new netns: link 3's old ends are cleared, then built anew.
        scenario.cmd_place("r4", "/ns/r4-new")
        await pause.wait_reached()  # the clear (a delete of the old ends) is in the driver

        await close_and_let_go(scenario, pause)

        # The clear finished; the build at the new place, a second call, never started.
        scenario.expect("log", ["delete(default/3)"])
        assert ("/ns/r4-new", "eth1") not in scenario.driver.kernel
    finally:
        pause.go.set()
        await scenario.close()
