"""FakeClock: time moves only when a test says so, and sleepers wake in deadline order."""

from __future__ import annotations

import asyncio

import pytest

from meshwire.control.common.clock import FakeClock, MonotonicClock
from tests.queue_helpers import settle, until


async def test_a_sleeper_wakes_only_when_time_reaches_its_deadline() -> None:
    clock = FakeClock()
    sleeper = asyncio.create_task(clock.sleep(2.0))
    await until(lambda: clock.sleepers == 1)

    clock.advance(1.5)
    await settle()
    assert not sleeper.done()

    clock.advance(0.5)
    await asyncio.wait_for(sleeper, timeout=5)
    assert clock.now() == 2.0


async def test_one_advance_wakes_every_due_sleeper_in_deadline_order() -> None:
    clock = FakeClock()
    woke: list[str] = []

    async def sleep_then_log(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append(name)

    tasks = [
        asyncio.create_task(sleep_then_log("late", 3.0)),
        asyncio.create_task(sleep_then_log("early", 1.0)),
        asyncio.create_task(sleep_then_log("never", 10.0)),
    ]
    await until(lambda: clock.sleepers == 3)
    assert clock.next_deadline() == 1.0

    clock.advance(5.0)
    await until(lambda: len(woke) == 2)
    assert woke == ["early", "late"]
    assert clock.sleepers == 1
    assert clock.next_deadline() == 10.0
    tasks[2].cancel()


async def test_a_cancelled_sleeper_is_no_longer_counted() -> None:
    clock = FakeClock()
    sleeper = asyncio.create_task(clock.sleep(1.0))
    await until(lambda: clock.sleepers == 1)
    sleeper.cancel()
    await settle()
    assert clock.sleepers == 0
    assert clock.next_deadline() is None
    clock.advance(2.0)


async def test_sleeping_zero_or_less_returns_without_advancing() -> None:
    clock = FakeClock(start=7.0)
    await asyncio.wait_for(clock.sleep(0), timeout=5)
    await asyncio.wait_for(clock.sleep(-1), timeout=5)
    assert clock.now() == 7.0


def test_time_cannot_go_backwards() -> None:
    with pytest.raises(ValueError, match="advance"):
        FakeClock().advance(-0.1)


async def test_the_real_clock_is_monotonic_and_sleeps() -> None:
    clock = MonotonicClock()
    before = clock.now()
    await clock.sleep(0.001)
    assert clock.now() > before
