"""A restarted daemon's wire manager takes over the wires its workers still carry.

The worker pool hands the manager, before any attach, each wire a running worker
holds (its AddWire, with the note naming the row and the TAP, and an fd on the
TAP). When the driver attaches the row on that same TAP, the wire is ready at
once, joined to the far end its worker still carries: nothing is sent to the
worker, the carrier never drops, and a handshake only verifies. Anything else
(another TAP, a far end that moved, a wire no row claims) is rebuilt or dropped.
"""

from __future__ import annotations

import dataclasses
import os

from wire_helpers import Network, WireNode, grpc_row, is_open, joined, wire_nodes

from meshwire.control.tables.links import LinkRow
from meshwire.control.wire.manager import Desired
from meshwire.control.wire.types import TapRef
from meshwire.dataplane.messages import AddWire


def restart(network: Network, node: WireNode, name: str) -> WireNode:
    """A new control process on `node`'s address, its pool holding what `node`'s
    workers held, every wire adopted as the real pool hands them over."""
    held = dict(node.pool.held)
    node.close()
    again = WireNode(name, node.ip, network)
    for wire_id, desired in held.items():
        fd = os.dup(desired.fd) if is_open(desired.fd) else os.open(os.devnull, os.O_RDONLY)
        generation = again.manager.adopt(desired.command, fd)
        assert generation is not None
        again.pool.held[wire_id] = Desired(desired.command, fd, generation)
    return again


def same_tap(node: WireNode, row: LinkRow) -> TapRef:
    return node.tap(row.local.pod)[0]


async def test_a_wire_its_worker_still_carries_is_ready_at_once_and_nothing_is_resent() -> None:
    with wire_nodes("a", "b") as (network, (a, b)):
        row_a, _ = await joined(a, b)
        a2 = restart(network, a, "a2")

        a2.manager.attach(row_a, same_tap(a2, row_a), None)

        assert a2.manager.ready(row_a.key)
        assert a2.pool.commands == 0
        # Verified by a handshake, which changes nothing.
        assert a2.manager.needs_handshake(b.ip)
        await a2.handshake(b)
        assert a2.manager.ready(row_a.key) and b.manager.ready("lab/1/r2")
        assert a2.pool.commands == 0
        a2.close()


async def test_a_same_node_link_stays_joined_while_its_ends_attach_one_by_one() -> None:
    with wire_nodes("a") as (network, (a,)):
        r1, r2 = grpc_row(1, "r1", "r2", a.ip), grpc_row(1, "r2", "r1", a.ip)
        a.attach(r1)
        a.attach(r2)
        a2 = restart(network, a, "a2")

        a2.manager.attach(r1, same_tap(a2, r1), None)
        assert a2.manager.ready(r1.key)  # its far end not attached yet: still joined
        a2.manager.attach(r2, same_tap(a2, r2), None)

        assert a2.manager.ready(r1.key) and a2.manager.ready(r2.key)
        assert a2.pool.commands == 0
        assert network.calls == []
        a2.close()


async def test_a_row_on_a_new_tap_gets_the_new_fd_and_the_adopted_one_is_closed() -> None:
    with wire_nodes("a", "b") as (network, (a, b)):
        row_a, _ = await joined(a, b)
        a2 = restart(network, a, "a2")
        adopted_fd = a2.pool.held[row_a.wire_id].fd

        new_fd = a2.attach(row_a, generation=1)

        assert not is_open(adopted_fd)
        await a2.handshake(b)
        assert a2.manager.ready(row_a.key)
        assert a2.pool.held[row_a.wire_id].fd == new_fd
        a2.close()


async def test_a_wire_whose_far_end_moved_waits_for_a_handshake_with_the_new_node() -> None:
    with wire_nodes("a", "b", "c") as (network, (a, b, c)):
        row_a, _ = await joined(a, b)
        a2 = restart(network, a, "a2")
        moved = dataclasses.replace(row_a, peer_node_ip=c.ip)

        a2.manager.attach(moved, same_tap(a2, moved), None)

        assert not a2.manager.ready(moved.key)
        assert row_a.wire_id not in a2.pool.held  # the worker lets the old far end go
        a2.close()


async def test_adopted_wires_no_row_claims_are_dropped_once_released() -> None:
    with wire_nodes("a", "b") as (network, (a, b)):
        row_a, _ = await joined(a, b)
        a2 = restart(network, a, "a2")
        adopted_fd = a2.pool.held[row_a.wire_id].fd

        a2.manager.release_unclaimed()

        assert a2.pool.held == {}
        assert not is_open(adopted_fd)
        assert a2.manager.held(row_a.key) is None
        a2.close()


def test_a_wire_whose_note_is_not_the_managers_is_refused_and_its_fd_closed() -> None:
    with wire_nodes("a") as (_, (a,)):
        read, write = os.pipe()
        os.close(write)
        command = AddWire(2, "lab", "169.254.0.12", 51112, 3, note="not a note")

        assert a.manager.adopt(command, read) is None
        assert not is_open(read)
