"""The work queue hands out keys, not events: a first change at once, bursts coalesce behind
a pass, delays hold."""

from __future__ import annotations

import asyncio

import pytest

from meshwire.control.common.clock import FakeClock
from meshwire.control.common.queue import DEFAULT_DEBOUNCE, WorkQueue
from tests.queue_helpers import settle, until


async def ready_keys(queue: WorkQueue) -> list[str]:
    """Take (and finish) every key ready now, without letting time pass."""
    taken: list[str] = []
    while True:
        getter = asyncio.create_task(queue.get())
        await settle()
        if not getter.done():
            getter.cancel()
            return taken
        key = getter.result()
        assert key is not None
        taken.append(key)
        queue.done(key)


async def test_a_key_added_many_times_before_it_is_taken_is_handed_out_once() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=1.0)
    for _ in range(5):
        queue.add("lab/r1")
    queue.add("lab/r2")
    assert queue.depth == 2

    clock.advance(1.0)
    assert await ready_keys(queue) == ["lab/r1", "lab/r2"]
    assert queue.depth == 0


async def take(queue: WorkQueue) -> str:
    """Take the key that is ready now (the test then owns it until done())."""
    key = await asyncio.wait_for(queue.get(), timeout=5)
    assert key is not None
    return key


async def test_a_first_add_is_ready_at_once_without_waiting_for_a_timer() -> None:
    # A lone restart must not wait out a debounce window nobody needs.
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=1.0)
    queue.add("lab/r1")
    assert await ready_keys(queue) == ["lab/r1"]
    assert clock.now() == 0.0


async def test_a_key_long_quiet_is_ready_at_once_again() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=1.0)
    queue.add("lab/r1")
    assert await ready_keys(queue) == ["lab/r1"]
    clock.advance(1.0)
    queue.add("lab/r1")
    assert await ready_keys(queue) == ["lab/r1"]


async def test_an_add_right_after_a_pass_waits_until_its_quiet_ends() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=1.0)
    queue.add("lab/r1")
    assert await ready_keys(queue) == ["lab/r1"]  # done at 0.0: quiet until 1.0

    clock.advance(0.25)
    queue.add("lab/r1")
    getter = asyncio.create_task(queue.get())
    await until(lambda: clock.next_deadline() == 1.0)
    clock.advance(0.5)
    await settle()
    assert not getter.done()

    clock.advance(0.25)
    assert await asyncio.wait_for(getter, timeout=5) == "lab/r1"


async def test_the_default_quiet_after_a_pass_is_fifty_milliseconds() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock)
    queue.add("lab/r1")
    assert await ready_keys(queue) == ["lab/r1"]
    queue.add("lab/r1")
    assert await ready_keys(queue) == []
    clock.advance(DEFAULT_DEBOUNCE)
    assert await ready_keys(queue) == ["lab/r1"]
    assert DEFAULT_DEBOUNCE == 0.05


async def test_a_burst_of_a_thousand_changes_costs_one_pass_per_key() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=0.05)
    keys = [f"lab/r{i}" for i in range(100)]
    for i in range(1000):
        queue.add(keys[i % len(keys)])
    assert sorted(await ready_keys(queue)) == sorted(keys)
    clock.advance(1.0)
    assert await ready_keys(queue) == []


async def test_changes_during_a_pass_coalesce_into_one_more_pass_after_it() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=0.05)
    queue.add("lab/r1")
    assert await take(queue) == "lab/r1"
    for _ in range(999):
        clock.advance(0.0001)
        queue.add("lab/r1")
    queue.done("lab/r1")
    assert await ready_keys(queue) == []
    clock.advance(0.05)
    assert await ready_keys(queue) == ["lab/r1"]
    clock.advance(1.0)
    assert await ready_keys(queue) == []


async def test_a_key_that_changes_without_pause_gets_a_pass_every_window() -> None:
    # It cannot be starved by its own changes, nor take a consumer for ever.
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=1.0)
    passes = 0
    for _ in range(12):
        queue.add("lab/r1")
        passes += len(await ready_keys(queue))
        clock.advance(0.25)
    assert passes == 3  # at 0.0, 1.0 and 2.0
    clock.advance(1.0)
    assert await ready_keys(queue) == ["lab/r1"]


async def test_keys_are_handed_out_in_the_order_they_became_ready() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=1.0)
    for key in ("lab/a", "lab/b"):
        queue.add(key)
    assert await ready_keys(queue) == ["lab/a", "lab/b"]  # both quiet until 1.0
    clock.advance(0.5)
    queue.add("lab/b")  # ready at 1.0
    queue.add_after("lab/c", 0.75)  # ready at 1.25
    queue.add_after("lab/d", 0.25)  # ready at 0.75
    queue.add("lab/a")  # ready at 1.0, after b
    clock.advance(2.0)
    assert await ready_keys(queue) == ["lab/d", "lab/b", "lab/a", "lab/c"]


async def test_add_after_holds_a_key_for_exactly_its_delay_without_debounce() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=1.0)
    queue.add_after("lab/r1", 3.0)
    getter = asyncio.create_task(queue.get())
    await until(lambda: clock.next_deadline() == 3.0)
    clock.advance(3.0)
    assert await asyncio.wait_for(getter, timeout=5) == "lab/r1"

    queue.done("lab/r1")
    queue.add_after("lab/r1", 0)
    assert await ready_keys(queue) == ["lab/r1"]


async def test_of_several_requested_times_the_earliest_wins() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=1.0)
    queue.add_after("lab/r1", 10.0)
    queue.add("lab/r1")
    queue.add_after("lab/r1", 5.0)
    assert queue.depth == 1
    clock.advance(1.0)
    assert await ready_keys(queue) == ["lab/r1"]
    # The superseded requests leave nothing behind.
    clock.advance(20.0)
    assert await ready_keys(queue) == []


async def test_a_waiting_consumer_wakes_for_a_key_that_becomes_ready_sooner() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=1.0)
    queue.add_after("lab/slow", 10.0)
    getter = asyncio.create_task(queue.get())
    await until(lambda: clock.next_deadline() == 10.0)

    queue.add_after("lab/fast", 0)
    assert await asyncio.wait_for(getter, timeout=5) == "lab/fast"


async def test_a_consumer_waiting_on_an_empty_queue_wakes_for_an_add() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=1.0)
    getter = asyncio.create_task(queue.get())
    await settle()
    queue.add("lab/r1")
    assert await asyncio.wait_for(getter, timeout=5) == "lab/r1"
    assert clock.now() == 0.0


async def test_a_cancelled_get_takes_nothing() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=0)
    getter = asyncio.create_task(queue.get())
    await settle()
    getter.cancel()
    await settle()
    queue.add("lab/r1")
    assert await ready_keys(queue) == ["lab/r1"]


def test_a_negative_debounce_is_rejected_by_name() -> None:
    with pytest.raises(ValueError, match="debounce"):
        WorkQueue(FakeClock(), debounce=-1)
