"""A goodbye to a node that never answers is given up, and nothing else waits on it.

When a wire's end is removed here, the far node is told (DeleteWires) so that it
lets its end go at once. A node that stays unreachable is told GOODBYE_ATTEMPTS
times and then no more: its own topology tells it the link is gone, and a node
that is gone for good must not keep this node's handshake loop busy forever.
"""

from __future__ import annotations

from wire_helpers import joined, wire_nodes

from meshwire.control.wire.manager import GOODBYE_ATTEMPTS


async def test_a_goodbye_to_a_node_that_never_answers_is_given_up_after_its_attempts() -> None:
    with wire_nodes("a", "b") as (network, (a, b)):
        row_a, _ = await joined(a, b)
        network.down.add(b.ip)

        a.manager.detach(row_a.key)  # r1's end of lab/1 is removed on node a
        for attempt in range(1, GOODBYE_ATTEMPTS + 1):
            assert a.manager.needs_handshake(b.ip), f"given up before attempt {attempt}"
            await a.handshake(b)
            assert network.count("DeleteWires") == attempt

        assert not a.manager.needs_handshake(b.ip)
        assert a.manager.goodbyes_for(b.ip) == []
        await a.handshake(b)  # a pass over b that comes anyway sends nothing
        assert network.count("DeleteWires") == GOODBYE_ATTEMPTS


async def test_a_goodbye_that_failed_a_few_times_is_still_delivered_when_the_node_is_back() -> None:
    with wire_nodes("a", "b") as (network, (a, b)):
        row_a, row_b = await joined(a, b)
        network.down.add(b.ip)
        a.manager.detach(row_a.key)
        for _ in range(GOODBYE_ATTEMPTS - 1):
            await a.handshake(b)

        network.down.discard(b.ip)
        await a.handshake(b)

        assert not a.manager.needs_handshake(b.ip)
        assert not b.manager.ready(row_b.key)  # b let its end go
