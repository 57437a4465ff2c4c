"""Keys whose rows share a netns run one at a time; keys in other namespaces do not wait.

`Lanes` is checked as bookkeeping, then inside the reconciler: with four
workers, a link held in the driver keeps a link of one of its pods out of the
driver and lets a link between two other pods in.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from reconciler_helpers import PAUSE_LIMIT, Scenario

from meshwire.control.reconcile.lanes import Lanes
from meshwire.control.tables.health import State
from meshwire.control.tables.links import LinkRow

NETNS = {"a": ["p1", "p2"], "b": ["p1", "p3"], "c": ["p4", "p5"], "d": ["p3", "p2"]}


def netns_of(key: str) -> list[str]:
    return NETNS[key]


def test_a_key_sharing_a_netns_with_a_running_one_is_parked_and_others_are_not() -> None:
    lanes = Lanes()
    assert lanes.claim("a", netns_of("a"))
    assert not lanes.claim("b", netns_of("b"))  # p1 is a's
    assert lanes.claim("c", netns_of("c"))
    assert (lanes.running(), lanes.parked()) == (2, 1)
    assert lanes.release("a", netns_of) == ["b"]
    assert (lanes.running(), lanes.parked()) == (2, 0)


def test_parked_keys_run_in_the_order_they_came_one_per_release() -> None:
    lanes = Lanes()
    assert lanes.claim("k0", ["p1"])
    for n in range(1, 1000):
        assert not lanes.claim(f"k{n}", ["p1"])
    order = []
    running = "k0"
    while True:
        ready = lanes.release(running, lambda key: ["p1"])
        if not ready:
            break
        assert len(ready) == 1
        running = ready[0]
        order.append(running)
    assert order == [f"k{n}" for n in range(1, 1000)]
    assert (lanes.running(), lanes.parked()) == (0, 0)


def test_a_parked_key_whose_other_netns_is_still_held_waits_for_that_one_too() -> None:
    lanes = Lanes()
    assert lanes.claim("a", netns_of("a"))  # p1, p2
    assert lanes.claim("b2", ["p3"])
    assert not lanes.claim("d", netns_of("d"))  # p2 (a) and p3 (b2): parked behind p2
    assert lanes.release("a", netns_of) == []  # p3 is still b2's: now parked behind it
    assert lanes.parked() == 1
    assert lanes.release("b2", lambda key: ["p3"] if key == "b2" else netns_of(key)) == ["d"]


def test_a_key_with_no_netns_and_one_releasing_twice_hold_nothing() -> None:
    lanes = Lanes()
    assert lanes.claim("x", ["", ""])
    assert lanes.claim("y", [""])
    assert lanes.release("x", netns_of) == []
    assert lanes.release("x", netns_of) == []
    assert lanes.running() == 1


def test_keys_behind_a_running_key_that_touch_only_its_namespaces_follow_it_in_order() -> None:
    lanes = Lanes()
    touched = {"k1": ["p1", "p2"], "k2": ["p2"], "k3": ["p1", "p9"], "k4": ["p1"], "k5": ["p2"]}
    assert lanes.claim("a", ["p1", "p2"])
    for key in ("k1", "k2", "k3", "k4", "k5"):
        assert not lanes.claim(key, touched[key])
    # Behind p1: k1, k3, k4 (k1 and k3 met p1 first); behind p2: k2, k5. k3 also
    # touches p9, which a does not hold: it stops p1's queue, in its place.
    assert lanes.follow("a", touched.__getitem__, 10) == ["k1", "k2", "k5"]
    assert lanes.parked() == 2
    assert lanes.follow("a", touched.__getitem__, 10) == []
    assert lanes.release("a", touched.__getitem__) == ["k3"]
    assert lanes.follow("k3", touched.__getitem__, 1) == ["k4"]
    assert (lanes.running(), lanes.parked()) == (1, 0)


def test_follow_takes_no_more_than_asked_and_leaves_the_rest_parked() -> None:
    lanes = Lanes()
    assert lanes.claim("k0", ["p1"])
    for n in range(1, 40):
        assert not lanes.claim(f"k{n}", ["p1"])
    assert lanes.follow("k0", lambda key: ["p1"], 15) == [f"k{n}" for n in range(1, 16)]
    assert lanes.parked() == 24
    assert lanes.release("k0", lambda key: ["p1"]) == ["k16"]


class Gate:
    """Holds each driver update of the links listed in `held` until let go, and
    records which links are in the driver at once."""

    def __init__(self, held: set[str]) -> None:
        self.held = held
        self.inside: set[str] = set()
        self.entered: list[str] = []
        self.go = threading.Event()
        self._lock = threading.Lock()

    def around(self, call: Callable[[LinkRow], Any]) -> Callable[[LinkRow], Any]:
        def gated(row: LinkRow) -> Any:
            uid = str(row.uid)
            with self._lock:
                self.inside.add(uid)
                self.entered.append(uid)
            try:
                if uid in self.held:
                    assert self.go.wait(PAUSE_LIMIT), "the test never let the call go on"
                return call(row)
            finally:
                with self._lock:
                    self.inside.discard(uid)

        return gated


async def until(condition: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PAUSE_LIMIT
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.002)


async def test_the_reconciler_keeps_a_pods_links_apart_and_runs_other_pods_beside() -> None:
    scenario = Scenario("lanes", concurrency=4)
    gate = Gate(held={"1"})
    scenario.driver.update = gate.around(scenario.driver.update)  # type: ignore[method-assign]
    try:
        scenario.cmd_pod("r1", "r2", "r3", "r4", "r5")
        for pod in ("r1", "r2", "r3", "r4", "r5"):
            scenario.cmd_place(pod, f"/ns/{pod}")
        scenario.cmd_synced()
        scenario.cmd_link("1", "r1:eth1", "r2:eth1")
        await until(lambda: "1" in gate.inside, "link 1 in the driver")
        scenario.cmd_link("2", "r1:eth2", "r3:eth1")  # shares r1's netns with link 1
        scenario.cmd_link("3", "r4:eth1", "r5:eth1")  # shares nothing
        await until(lambda: "3" in gate.entered, "link 3 in the driver beside link 1")
        # Give link 2 every chance to start, should the lanes let it.
        for _ in range(50):
            await asyncio.sleep(0)
        assert "2" not in gate.entered
        gate.go.set()
        await until(lambda: "2" in gate.entered, "link 2 once link 1 is done")
        await scenario.cmd_settle()
        assert gate.entered.index("2") > gate.entered.index("1")
        assert {key for key in scenario.daemon.links} == {"default/1", "default/2", "default/3"}
    finally:
        gate.go.set()
        await scenario.daemon.stop()


async def test_a_pods_parked_links_run_in_one_trip_and_a_failure_stays_its_own() -> None:
    scenario = Scenario("batch", concurrency=4)
    gate = Gate(held={"1"})
    scenario.driver.update = gate.around(scenario.driver.update)  # type: ignore[method-assign]
    reconciler = scenario.daemon.reconciler
    trips: list[list[str]] = []
    drive = reconciler._drive

    def recorded(passes: list[Any]) -> None:
        trips.append([each.key for each in passes])
        drive(passes)

    reconciler._drive = recorded  # type: ignore[method-assign]
    try:
        scenario.cmd_pod("r1", "r2")
        for pod in ("r1", "r2"):
            scenario.cmd_place(pod, f"/ns/{pod}")
        scenario.cmd_synced()
        scenario.cmd_link("1", "r1:eth1", "r2:eth1")
        await until(lambda: "1" in gate.inside, "link 1 in the driver")
        scenario.cmd_fail("update", "default/3")
        for n in range(2, 6):
            scenario.cmd_link(str(n), f"r1:eth{n}", f"r2:eth{n}")
        await until(lambda: reconciler._lanes.parked() == 4, "links 2-5 parked behind link 1")
        gate.go.set()
        await until(lambda: "5" in gate.entered, "links 2-5 in the driver")
        # All four went to the pool together, in the order they came.
        assert ["default/2", "default/3", "default/4", "default/5"] in trips
        statuses = {n: scenario.daemon.links.health(f"default/{n}") for n in range(2, 6)}
        assert statuses[3].state is State.ERROR and "injected" in statuses[3].message
        assert all(statuses[n].state is State.DONE for n in (2, 4, 5))
        # The failed one is retried on its own and then done.
        await scenario.cmd_advance("1")
        await scenario.cmd_settle()
        assert scenario.daemon.links.health("default/3").state is State.DONE
        assert "update(default/3) fail" in scenario.driver.log
    finally:
        gate.go.set()
        await scenario.daemon.stop()
