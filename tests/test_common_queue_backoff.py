"""Failed keys come back with per-key exponential backoff; a success resets it."""

from __future__ import annotations

import asyncio

import pytest

from meshwire.control.common.clock import FakeClock
from meshwire.control.common.queue import WorkQueue
from meshwire.control.common.retries import ExponentialBackoff
from tests.queue_helpers import until


async def take(queue: WorkQueue, key: str) -> None:
    queue.add_after(key, 0)
    assert await asyncio.wait_for(queue.get(), timeout=5) == key


async def fail_once(queue: WorkQueue, clock: FakeClock, key: str) -> float:
    """Fail the pass over `key` (being processed); return how long the queue holds it back.

    On return the key has come round again and is being processed.
    """
    queue.add_rate_limited(key)
    queue.done(key)
    getter = asyncio.create_task(queue.get())
    await until(lambda: clock.next_deadline() is not None)
    deadline = clock.next_deadline()
    assert deadline is not None
    delay = deadline - clock.now()
    clock.advance(delay)
    assert await asyncio.wait_for(getter, timeout=5) == key
    return delay


async def test_a_failing_key_backs_off_from_100ms_doubling_to_a_60s_cap() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=0)
    await take(queue, "lab/r1")
    delays = [await fail_once(queue, clock, "lab/r1") for _ in range(12)]
    expected = [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 51.2, 60.0, 60.0]
    assert delays == pytest.approx(expected)
    assert queue.num_requeues("lab/r1") == 12


async def test_a_success_resets_the_backoff() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=0)
    await take(queue, "lab/r1")
    for _ in range(5):
        await fail_once(queue, clock, "lab/r1")
    queue.forget("lab/r1")
    assert queue.num_requeues("lab/r1") == 0
    assert await fail_once(queue, clock, "lab/r1") == pytest.approx(0.1)


async def test_each_key_backs_off_on_its_own() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=0)
    await take(queue, "lab/bad")
    for _ in range(4):
        await fail_once(queue, clock, "lab/bad")
    await take(queue, "lab/good")
    assert await fail_once(queue, clock, "lab/good") == pytest.approx(0.1)
    assert queue.num_requeues("lab/bad") == 4


async def test_a_fresh_add_overrides_a_long_backoff() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=1.0, limiter=ExponentialBackoff(base=30.0, cap=60.0))
    queue.add_after("lab/r1", 0)
    assert await asyncio.wait_for(queue.get(), timeout=5) == "lab/r1"
    queue.add_rate_limited("lab/r1")  # back in 30 s
    queue.done("lab/r1")

    queue.add("lab/r1")  # the topology changed: look again after the window
    clock.advance(1.0)
    assert await asyncio.wait_for(queue.get(), timeout=5) == "lab/r1"
