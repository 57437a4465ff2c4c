"""One consumer per key at a time, a re-add during a pass runs after it, nothing is dropped."""

from __future__ import annotations

import asyncio
import random

import pytest

from meshwire.control.common.clock import FakeClock
from meshwire.control.common.queue import WorkQueue
from tests.queue_helpers import settle, until


async def test_a_key_being_processed_is_not_handed_to_a_second_consumer() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=0)
    queue.add("lab/r1")
    first = await asyncio.wait_for(queue.get(), timeout=5)
    assert first == "lab/r1"

    queue.add("lab/r1")
    second = asyncio.create_task(queue.get())
    clock.advance(10.0)
    await settle()
    assert not second.done()
    assert queue.in_flight == 1

    queue.done("lab/r1")
    assert await asyncio.wait_for(second, timeout=5) == "lab/r1"


async def test_other_keys_flow_past_a_key_being_processed() -> None:
    queue = WorkQueue(FakeClock(), debounce=0)
    queue.add("lab/r1")
    assert await asyncio.wait_for(queue.get(), timeout=5) == "lab/r1"
    queue.add("lab/r1")
    queue.add("lab/r2")
    assert await asyncio.wait_for(queue.get(), timeout=5) == "lab/r2"


async def test_a_key_re_added_during_its_pass_runs_again_its_window_after_done() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=1.0)
    queue.add("lab/r1")
    assert await asyncio.wait_for(queue.get(), timeout=5) == "lab/r1"

    queue.add("lab/r1")
    clock.advance(1.5)  # a pass longer than the window
    queue.done("lab/r1")  # at 1.5: the re-add is ready at 2.5

    getter = asyncio.create_task(queue.get())
    await until(lambda: clock.next_deadline() == 2.5)
    clock.advance(0.75)
    await settle()
    assert not getter.done()
    clock.advance(0.25)
    assert await asyncio.wait_for(getter, timeout=5) == "lab/r1"


async def test_a_re_add_during_a_pass_with_no_debounce_is_ready_at_done() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=0)
    queue.add("lab/r1")
    assert await asyncio.wait_for(queue.get(), timeout=5) == "lab/r1"
    queue.add("lab/r1")
    queue.done("lab/r1")
    assert await asyncio.wait_for(queue.get(), timeout=5) == "lab/r1"
    assert clock.now() == 0.0


async def test_a_retry_asked_during_a_pass_is_not_pushed_back_by_a_re_add() -> None:
    # Several requests: the earliest wins, whichever kind asked first.
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=1.0)
    queue.add("lab/r1")
    assert await asyncio.wait_for(queue.get(), timeout=5) == "lab/r1"
    queue.add_after("lab/r1", 0.25)
    queue.add("lab/r1")
    assert queue.depth == 1
    queue.done("lab/r1")

    getter = asyncio.create_task(queue.get())
    await until(lambda: clock.next_deadline() == 0.25)
    clock.advance(0.25)
    assert await asyncio.wait_for(getter, timeout=5) == "lab/r1"
    queue.done("lab/r1")
    assert queue.depth == 0


def test_done_for_a_key_not_being_processed_is_a_caller_bug() -> None:
    queue = WorkQueue(FakeClock())
    queue.add("lab/r1")
    with pytest.raises(ValueError, match="lab/r1"):
        queue.done("lab/r1")


async def test_shutdown_releases_waiting_consumers_and_ignores_later_adds() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=1.0)
    queue.add_after("lab/pending", 1.0)
    waiting = [asyncio.create_task(queue.get()) for _ in range(3)]
    await until(lambda: clock.sleepers == 3)

    queue.shutdown()
    assert await asyncio.wait_for(asyncio.gather(*waiting), timeout=5) == [None, None, None]
    queue.add("lab/late")
    queue.add_rate_limited("lab/late")
    assert queue.depth == 0
    assert queue.num_requeues("lab/late") == 0
    assert await asyncio.wait_for(queue.get(), timeout=5) is None


async def test_shutdown_drops_ready_keys_but_accepts_done_for_passes_in_flight() -> None:
    queue = WorkQueue(FakeClock(), debounce=0)
    queue.add("lab/r1")
    queue.add("lab/r2")
    assert await asyncio.wait_for(queue.get(), timeout=5) == "lab/r1"

    queue.shutdown()
    assert queue.shutting_down
    assert await asyncio.wait_for(queue.get(), timeout=5) is None
    queue.done("lab/r1")
    assert queue.in_flight == 0


@pytest.mark.parametrize("debounce", [0.0, 1.0])
async def test_under_concurrent_adds_every_add_is_followed_by_a_pass(debounce: float) -> None:
    """Producers add while consumers process; no key's last add goes without a later pass."""
    rng = random.Random(743)
    clock = FakeClock()
    queue = WorkQueue(clock, debounce=debounce)
    keys = [f"lab/r{i}" for i in range(8)]
    step = 0
    last_add: dict[str, int] = {}
    pass_starts: dict[str, list[int]] = {key: [] for key in keys}
    active: set[str] = set()
    overlaps: list[str] = []

    async def producer() -> None:
        nonlocal step
        for _ in range(300):
            key = rng.choice(keys)
            step += 1
            last_add[key] = step
            queue.add(key)
            for _ in range(rng.randrange(3)):
                await asyncio.sleep(0)

    async def consumer() -> None:
        nonlocal step
        while (key := await queue.get()) is not None:
            if key in active:
                overlaps.append(key)
            active.add(key)
            step += 1
            pass_starts[key].append(step)
            for _ in range(rng.randrange(4)):
                await asyncio.sleep(0)
            active.discard(key)
            queue.done(key)

    async def ticker() -> None:
        while True:
            clock.advance(0.25)
            await asyncio.sleep(0)

    consumers = [asyncio.create_task(consumer()) for _ in range(4)]
    tick = asyncio.create_task(ticker())
    await asyncio.wait_for(asyncio.gather(*(producer() for _ in range(3))), timeout=10)
    await until(lambda: queue.depth == 0 and queue.in_flight == 0)
    tick.cancel()
    queue.shutdown()
    await asyncio.wait_for(asyncio.gather(*consumers), timeout=5)

    assert overlaps == []
    for key, added_at in last_add.items():
        assert pass_starts[key], f"{key} was added but never processed"
        assert pass_starts[key][-1] > added_at, f"{key}: last add at {added_at} never processed"
    # Coalescing did happen: far fewer passes than adds.
    assert sum(len(starts) for starts in pass_starts.values()) < 900
