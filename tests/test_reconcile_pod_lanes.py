"""Two rows of one pod end never run at once, even when they name two netns.

A pod end's node side is named by its pod and interface, not by its netns: a
detached row (its far pod not running) and the veth row that replaces it once
the far pod starts share it, even when the pod moved to a new netns between
them. Found by the churn test: the detached row's build, still running when
the veth row was built, took the carrier the veth had just given and removed
its stitch, and the link stayed down with its row done.

Here the detached row's build is held in the driver (`FakeDriver` from
reconciler_helpers.py) while r1 moves and r2 starts: the veth row waits for it.
"""

from __future__ import annotations

import asyncio

from reconciler_helpers import Pause, Scenario

# Long enough for a free worker to start the veth row's pass, were it allowed to.
WINDOW = 0.3


async def test_the_row_replacing_a_detached_end_waits_for_its_pass_in_another_netns() -> None:
    scenario = Scenario("one pod end, two netns", concurrency=2)
    pause = Pause()
    try:
        scenario.cmd_pod("r1", "r2")
        scenario.cmd_link("1", "r1:eth1", "r2:eth1")
        scenario.cmd_synced()
        scenario.driver.update = pause.around(scenario.driver.update)  # type: ignore[method-assign]
        scenario.cmd_place("r1", "/ns/r1a")
        await pause.wait_reached()  # r1's detached end is being built, r2 not running
        scenario.cmd_place("r1", "/ns/r1b")
        scenario.cmd_place("r2", "/ns/r2")
        await asyncio.sleep(WINDOW)
        assert "update(default/1)" not in scenario.driver.log, scenario.driver.log
        pause.go.set()
        await scenario.cmd_settle()
        log = scenario.driver.log
        assert log.index("update(default/1/r1)") < log.index("update(default/1)"), log
        assert ("/ns/r1b", "eth1") in scenario.driver.kernel
    finally:
        pause.go.set()
        await scenario.daemon.stop()
