"""Status writes: one merge patch per topology, coalesced, rate-limited, retried, never dropped."""

from __future__ import annotations

import asyncio
import logging

import pytest

from meshwire.control.common.clock import FakeClock
from meshwire.control.reconcile.status_writer import StatusWriter
from tests.queue_helpers import settle, until
from tests.status_helpers import FakeStatusApi, clock, started

__all__ = ["clock"]


async def test_fields_set_before_the_writer_gets_to_them_go_out_as_one_write(
    clock: FakeClock,
) -> None:
    api = FakeStatusApi("lab/r1")
    writer = started(api, clock)
    writer.set("lab/r1", src_ip="10.0.0.1", container_id="c1")
    writer.set("lab/r1", net_ns="/proc/42/ns/net")
    writer.set("lab/r1", src_ip="10.0.0.2")
    await asyncio.wait_for(writer.flush(), timeout=5)

    expected = {"src_ip": "10.0.0.2", "container_id": "c1", "net_ns": "/proc/42/ns/net"}
    assert api.writes == [("lab/r1", expected)]
    assert api.statuses["lab/r1"] == expected
    await writer.close()


async def test_sets_during_a_write_wait_for_it_and_follow_in_one_more_write(
    clock: FakeClock,
) -> None:
    api = FakeStatusApi("lab/r1")
    writer = started(api, clock)
    api.gate.clear()
    writer.set("lab/r1", src_ip="10.0.0.1")
    await until(lambda: len(api.writes) == 1)

    writer.set("lab/r1", plumbing_error="eth1: peer lab/r2 not found")
    writer.set("lab/r1", plumbing_error="")
    writer.set("lab/r1", net_ns="/proc/7/ns/net")
    await settle()
    assert len(api.writes) == 1
    api.gate.set()
    await asyncio.wait_for(writer.flush(), timeout=5)

    assert api.writes_to("lab/r1") == [
        {"src_ip": "10.0.0.1"},
        {"plumbing_error": "", "net_ns": "/proc/7/ns/net"},
    ]
    assert api.most_in_flight_per_key == 1
    await writer.close()


async def test_a_lone_write_goes_out_at_once_and_one_right_after_it_at_the_rate(
    clock: FakeClock,
) -> None:
    # Rate-limited, yet no fixed delay in front of the first write: a restarted
    # pod's placement is in the API as soon as the API answers.
    api = FakeStatusApi("lab/r1")
    writer = started(api, clock, rate=2.0, burst=1)
    writer.set("lab/r1", src_ip="10.0.0.1")
    await asyncio.wait_for(writer.written("lab/r1"), timeout=5)
    assert api.writes == [("lab/r1", {"src_ip": "10.0.0.1"})]
    assert clock.now() == 0.0

    writer.set("lab/r1", src_ip="10.0.0.2")  # the bucket is empty: 0.5 s
    await settle()
    assert len(api.writes) == 1
    clock.advance(0.5)
    await asyncio.wait_for(writer.written("lab/r1"), timeout=5)
    assert api.writes[-1] == ("lab/r1", {"src_ip": "10.0.0.2"})
    await writer.close()


async def test_writes_to_different_topologies_proceed_side_by_side(clock: FakeClock) -> None:
    api = FakeStatusApi("lab/r1", "lab/r2", "lab/r3")
    writer = started(api, clock, writers=3)
    api.gate.clear()
    for key in ("lab/r1", "lab/r2", "lab/r3"):
        writer.set(key, src_ip="10.0.0.1")
    await until(lambda: sum(api.in_flight.values()) == 3)
    api.gate.set()
    await asyncio.wait_for(writer.flush(), timeout=5)
    await writer.close()


async def test_writes_beyond_the_burst_go_out_at_the_configured_rate(clock: FakeClock) -> None:
    keys = [f"lab/r{i}" for i in range(6)]
    api = FakeStatusApi(*keys)
    writer = started(api, clock, rate=2.0, burst=3)
    for key in keys:
        writer.set(key, src_ip="10.0.0.1")

    written = []
    for _ in range(4):
        await settle()
        written.append(len(api.writes))
        clock.advance(0.5)
    assert written == [3, 4, 5, 6]
    await asyncio.wait_for(writer.flush(), timeout=5)
    await writer.close()


async def test_a_failed_write_is_retried_with_backoff_until_it_lands(clock: FakeClock) -> None:
    api = FakeStatusApi("lab/r1")
    api.fail_next["lab/r1"] = 3
    writer = started(api, clock)
    writer.set("lab/r1", src_ip="10.0.0.1")

    attempts = []
    for step in (0.1, 0.2, 0.4):
        await until(lambda: clock.sleepers > 0)
        attempts.append(len(api.writes))
        clock.advance(step)
    await asyncio.wait_for(writer.flush(), timeout=5)
    assert attempts == [1, 2, 3]
    assert len(api.writes) == 4
    assert api.statuses["lab/r1"] == {"src_ip": "10.0.0.1"}
    await writer.close()


async def test_fields_of_a_failed_write_are_kept_under_newer_ones(clock: FakeClock) -> None:
    api = FakeStatusApi("lab/r1")
    api.fail_next["lab/r1"] = 1
    writer = started(api, clock)
    writer.set("lab/r1", src_ip="10.0.0.1", net_ns="/proc/1/ns/net")
    await until(lambda: clock.sleepers > 0)

    # A new set during the backoff neither skips the backoff nor loses the old fields.
    writer.set("lab/r1", src_ip="10.0.0.9")
    await settle()
    assert len(api.writes) == 1
    clock.advance(0.1)
    await asyncio.wait_for(writer.flush(), timeout=5)
    assert api.writes_to("lab/r1")[-1] == {"src_ip": "10.0.0.9", "net_ns": "/proc/1/ns/net"}
    await writer.close()


async def test_a_set_during_a_write_that_fails_wins_over_the_failed_value(
    clock: FakeClock,
) -> None:
    api = FakeStatusApi("lab/r1")
    api.fail_next["lab/r1"] = 1
    api.gate.clear()
    writer = started(api, clock)
    writer.set("lab/r1", src_ip="10.0.0.1", container_id="c1")
    await until(lambda: len(api.writes) == 1)
    writer.set("lab/r1", src_ip="10.0.0.2")
    api.gate.set()
    await until(lambda: clock.sleepers > 0)
    clock.advance(0.1)
    await asyncio.wait_for(writer.flush(), timeout=5)
    assert api.statuses["lab/r1"] == {"src_ip": "10.0.0.2", "container_id": "c1"}
    await writer.close()


async def test_a_success_resets_the_backoff_of_that_topology(clock: FakeClock) -> None:
    api = FakeStatusApi("lab/r1")
    api.fail_next["lab/r1"] = 2
    writer = started(api, clock)
    writer.set("lab/r1", src_ip="10.0.0.1")
    for step in (0.1, 0.2):
        await until(lambda: clock.sleepers > 0)
        clock.advance(step)
    await asyncio.wait_for(writer.flush(), timeout=5)

    api.fail_next["lab/r1"] = 1
    writer.set("lab/r1", src_ip="10.0.0.2")
    await until(lambda: clock.sleepers > 0)
    assert clock.next_deadline() == pytest.approx(clock.now() + 0.1)
    clock.advance(0.1)
    await asyncio.wait_for(writer.flush(), timeout=5)
    await writer.close()


async def test_a_write_to_a_deleted_topology_is_dropped_with_a_log_line(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    api = FakeStatusApi("lab/r1")
    writer = started(api, clock, writers=1)
    with caplog.at_level(logging.INFO):
        writer.set("lab/gone", src_ip="10.0.0.1")
        await asyncio.wait_for(writer.flush(), timeout=5)
    assert "lab/gone" in caplog.text
    assert writer.pending == 0

    clock.advance(120.0)
    writer.set("lab/r1", src_ip="10.0.0.2")
    await asyncio.wait_for(writer.flush(), timeout=5)
    assert api.writes == [("lab/gone", {"src_ip": "10.0.0.1"}), ("lab/r1", {"src_ip": "10.0.0.2"})]
    await writer.close()


async def test_under_many_concurrent_sets_the_api_ends_with_the_last_value_of_each_field(
    clock: FakeClock,
) -> None:
    keys = [f"lab/r{i}" for i in range(10)]
    api = FakeStatusApi(*keys)
    for key in keys[::3]:
        api.fail_next[key] = 2
    writer = started(api, clock, rate=1000.0, burst=1000)
    last: dict[str, dict[str, str]] = {key: {} for key in keys}

    async def setter(seed: int) -> None:
        for i in range(50):
            key = keys[(seed * 7 + i) % len(keys)]
            field = ("src_ip", "net_ns", "container_id", "plumbing_error")[(seed + i) % 4]
            value = f"{seed}-{i}"
            last[key][field] = value
            writer.set(key, **{field: value})
            await asyncio.sleep(0)

    async def ticker() -> None:
        while True:
            clock.advance(0.05)
            await asyncio.sleep(0)

    tick = asyncio.create_task(ticker())
    await asyncio.wait_for(asyncio.gather(*(setter(s) for s in range(5))), timeout=5)
    await asyncio.wait_for(writer.flush(), timeout=5)
    tick.cancel()
    assert api.statuses == last
    assert api.most_in_flight_per_key == 1
    await writer.close()


async def test_after_close_set_is_a_no_op_and_flush_returns(clock: FakeClock) -> None:
    api = FakeStatusApi("lab/r1")
    api.fail_next["lab/r1"] = 1
    writer = started(api, clock)
    writer.set("lab/r1", src_ip="10.0.0.1")
    await until(lambda: clock.sleepers > 0)
    await asyncio.wait_for(writer.close(), timeout=5)

    writer.set("lab/r1", src_ip="10.0.0.2")
    await asyncio.wait_for(writer.flush(), timeout=5)
    clock.advance(120.0)
    await settle()
    assert len(api.writes) == 1


@pytest.mark.parametrize(
    ("key", "fields", "named"),
    [
        ("r1", {"src_ip": "10.0.0.1"}, "namespace/name"),
        ("lab/", {"src_ip": "10.0.0.1"}, "namespace/name"),
        ("lab/r1", {"skipped": "r2"}, "skipped"),
        ("lab/r1", {"src_ip": 42}, "src_ip"),
    ],
)
def test_a_malformed_set_is_rejected_naming_the_key_or_field(
    key: str, fields: dict[str, object], named: str
) -> None:
    writer = StatusWriter(FakeStatusApi(), clock=FakeClock())
    with pytest.raises(ValueError, match=named):
        writer.set(key, **fields)  # type: ignore[arg-type]


async def test_written_waits_for_one_topology_through_retries_and_not_for_others(
    clock: FakeClock,
) -> None:
    api = FakeStatusApi("lab/r1", "lab/r2")
    api.fail_next["lab/r1"] = 1
    writer = started(api, clock)
    await asyncio.wait_for(writer.written("lab/r1"), timeout=5)  # nothing recorded: at once
    api.gate.clear()
    writer.set("lab/r1", src_ip="10.0.0.1")
    writer.set("lab/r2", src_ip="10.0.0.2")
    waiting = asyncio.create_task(writer.written("lab/r1"))
    await until(lambda: len(api.writes) == 2)
    api.gate.set()
    await until(lambda: clock.sleepers > 0)  # r1's write failed; r2's landed
    await settle()
    assert not waiting.done()
    await asyncio.wait_for(writer.written("lab/r2"), timeout=5)

    clock.advance(0.1)
    await asyncio.wait_for(waiting, timeout=5)
    assert api.statuses["lab/r1"] == {"src_ip": "10.0.0.1"}
    await writer.close()


async def test_written_returns_when_the_writer_closes(clock: FakeClock) -> None:
    api = FakeStatusApi("lab/r1")
    api.gate.clear()
    writer = started(api, clock)
    writer.set("lab/r1", src_ip="10.0.0.1")
    waiting = asyncio.create_task(writer.written("lab/r1"))
    await settle()
    await writer.close()
    await asyncio.wait_for(waiting, timeout=5)
