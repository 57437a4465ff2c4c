"""Conditional status writes: a CNI DEL clears a pod's placement only while it is its own.

Found by bench/churn.py with API server restarts: a pod moved from node1 to
node3; node1's clear (CNI DEL) was held back by retries while the API was
down, landed after node3's placement, and wiped it, so every link of the pod
was torn down on every node and stayed down.
"""

from __future__ import annotations

import asyncio

from meshwire.control.common.clock import FakeClock
from meshwire.control.tables.local_placements import StatusRead
from tests.queue_helpers import settle, until
from tests.status_helpers import FakeStatusApi, HeardWrites, clock, started

__all__ = ["clock"]

CLEARED = {"src_ip": "", "net_ns": "", "container_id": ""}
PLACED_A = {"src_ip": "10.0.0.1", "net_ns": "/var/run/netns/a", "container_id": "a"}
PLACED_B = {"src_ip": "10.0.0.3", "net_ns": "/var/run/netns/b", "container_id": "b"}


async def test_a_clear_for_the_container_the_status_names_lands(clock: FakeClock) -> None:
    api = FakeStatusApi("lab/r1")
    api.statuses["lab/r1"] = dict(PLACED_A)
    writer = started(api, clock)
    writer.set("lab/r1", if_container="a", **CLEARED)
    await asyncio.wait_for(writer.flush(), timeout=5)
    assert api.statuses["lab/r1"] == CLEARED
    assert api.conditions == ["a"]
    await writer.close()


async def test_a_clear_held_back_by_retries_spares_the_placement_another_node_wrote(
    clock: FakeClock,
) -> None:
    api = FakeStatusApi("lab/r1", "lab/r2")
    api.statuses["lab/r1"] = dict(PLACED_A)
    api.fail_next["lab/r1"] = 2
    writer = started(api, clock)
    writer.set("lab/r1", if_container="a", **CLEARED)
    await until(lambda: clock.sleepers > 0)
    # Meanwhile the pod's new node writes its placement.
    api.statuses["lab/r1"] = dict(PLACED_B)
    for step in (0.1, 0.2):
        clock.advance(step)
        await settle()
    await asyncio.wait_for(writer.flush(), timeout=5)

    assert api.statuses["lab/r1"] == PLACED_B
    assert api.conditions == ["a", "a", "a"]
    # Dropped, not retried: nothing is left to write, and other topologies still are.
    writer.set("lab/r2", plumbing_error="")
    await asyncio.wait_for(writer.flush(), timeout=5)
    assert len(api.writes_to("lab/r1")) == 3
    assert api.statuses["lab/r2"] == {"plumbing_error": ""}
    await writer.close()


async def test_a_new_placement_on_this_node_replaces_a_pending_clear_unconditionally(
    clock: FakeClock,
) -> None:
    # A pod restarted on this node: DEL of sandbox a, then ADD of sandbox c, before
    # the API took either (it still names a sandbox of long ago).
    api = FakeStatusApi("lab/r1")
    api.statuses["lab/r1"] = {"container_id": "old"}
    api.gate.clear()
    writer = started(api, clock)
    writer.set("lab/r1", plumbing_error="x")
    await until(lambda: len(api.writes) == 1)
    writer.set("lab/r1", if_container="a", **CLEARED)
    writer.set("lab/r1", src_ip="10.0.0.1", net_ns="/var/run/netns/c", container_id="c")
    api.gate.set()
    await asyncio.wait_for(writer.flush(), timeout=5)

    assert api.conditions == [None, None]
    assert api.statuses["lab/r1"]["container_id"] == "c"
    await writer.close()


async def test_fields_set_after_a_clear_join_its_condition_and_go_with_it(
    clock: FakeClock,
) -> None:
    # The reconciler clears the pod's plumbing_error after its DEL: that write is
    # as much this node's as the clear, and must not land on the new node's status.
    api = FakeStatusApi("lab/r1")
    api.statuses["lab/r1"] = {**PLACED_B, "plumbing_error": "eth1: b's own error"}
    writer = started(api, clock)
    writer.set("lab/r1", if_container="a", **CLEARED)
    writer.set("lab/r1", plumbing_error="")
    await asyncio.wait_for(writer.flush(), timeout=5)

    assert api.conditions == ["a"]
    assert api.statuses["lab/r1"] == {**PLACED_B, "plumbing_error": "eth1: b's own error"}
    await writer.close()


async def test_a_failed_clear_keeps_its_condition_under_fields_set_during_its_backoff(
    clock: FakeClock,
) -> None:
    api = FakeStatusApi("lab/r1")
    api.statuses["lab/r1"] = dict(PLACED_A)
    api.fail_next["lab/r1"] = 1
    writer = started(api, clock)
    writer.set("lab/r1", if_container="a", **CLEARED)
    await until(lambda: clock.sleepers > 0)
    writer.set("lab/r1", plumbing_error="")
    clock.advance(0.1)
    await asyncio.wait_for(writer.flush(), timeout=5)

    assert api.conditions == ["a", "a"]
    assert api.writes_to("lab/r1")[-1] == {**CLEARED, "plumbing_error": ""}
    await writer.close()


async def test_the_listener_hears_each_write_that_landed_and_each_dropped_one(
    clock: FakeClock,
) -> None:
    # The topologies table keeps a placement written here until the API has it:
    # it needs the resourceVersion each write reached, and to know of a dropped one.
    api = FakeStatusApi("lab/r1", "lab/r2")
    api.statuses["lab/r1"] = dict(PLACED_B)
    api.fail_next["lab/r2"] = 1
    heard = HeardWrites()
    writer = started(api, clock, listener=heard)
    writer.set("lab/r1", if_container="a", **CLEARED)
    writer.set("lab/r2", **PLACED_A)
    writer.set("lab/gone", **PLACED_A)
    await until(lambda: clock.sleepers > 0)
    assert heard.landed == []  # r2's write failed; it waits out its backoff
    clock.advance(0.1)
    await asyncio.wait_for(writer.flush(), timeout=5)

    assert heard.landed == [("lab/r2", PLACED_A, str(api.resource_version))]
    assert sorted(heard.dropped) == [("lab/gone", PLACED_A), ("lab/r1", CLEARED)]
    # A failed condition also tells what the API had instead; a gone object, nothing.
    reads = {key: read for (key, _), read in zip(heard.dropped, heard.reads, strict=True)}
    # r1 was read before r2's write bumped the version.
    assert reads == {"lab/r1": StatusRead(PLACED_B, "0"), "lab/gone": None}
    await writer.close()
