"""A same-node link under emulation: the manager joins its two ends, with no handshake.

Both ends are wires of one node (each pod's `grpc` row names this node as the
peer's). The manager joins them as soon as both are attached, tells their
worker to carry them TAP to TAP (AddWire `local`, each end naming the other),
and unjoins both when either goes: no Peer RPC, no goodbye, no stream.
"""

from __future__ import annotations

import dataclasses

from wire_helpers import grpc_row, wire_nodes

from meshwire.control.tables.links import LinkRow


def ends(ip: str) -> tuple[LinkRow, LinkRow]:
    return grpc_row(1, "r1", "r2", ip), grpc_row(1, "r2", "r1", ip)


def test_both_ends_attached_are_joined_tap_to_tap_without_a_handshake() -> None:
    for first in (0, 1):  # whichever end the reconciler realises first
        with wire_nodes("a") as (network, (a,)):
            rows = ends(a.ip)
            a.attach(rows[first])
            assert not a.manager.ready(rows[first].key)
            a.attach(rows[1 - first])

            assert all(a.manager.ready(row.key) for row in rows)
            held = {w: d.command for w, d in a.pool.held.items()}
            r1, r2 = (row.wire_id for row in rows)
            assert {w: (c.local, c.peer_wire_id) for w, c in held.items()} == {
                r1: (True, r2),
                r2: (True, r1),
            }
            assert not a.manager.needs_handshake(a.ip)
            assert a.manager.expected_refs(lambda wire_id: 0) == {}
            assert network.calls == []


def test_an_end_removed_unjoins_the_other_and_says_no_goodbye() -> None:
    with wire_nodes("a") as (network, (a,)):
        r1, r2 = ends(a.ip)
        a.attach(r1)
        a.attach(r2)
        a.manager.detach(r1.key)

        assert not a.manager.ready(r2.key)
        assert a.pool.held == {}
        assert not a.manager.needs_handshake(a.ip)
        a.attach(r1)  # realised again: joined again at once
        assert a.manager.ready(r1.key) and a.manager.ready(r2.key)
        assert network.calls == []


def test_a_pulled_cable_takes_both_ends_out_of_the_worker_and_plugs_back_joined() -> None:
    with wire_nodes("a") as (network, (a,)):
        r1, r2 = ends(a.ip)
        a.attach(r1)
        a.attach(r2)
        for row in (r1, r2):
            a.manager.attach(dataclasses.replace(row, down=True), a.manager.held(row.key), None)  # type: ignore[arg-type]
        assert a.pool.held == {}
        assert a.manager.ready(r1.key) and a.manager.ready(r2.key)
        for row in (r1, r2):
            a.manager.attach(row, a.manager.held(row.key), None)  # type: ignore[arg-type]
        assert {d.command.local for d in a.pool.held.values()} == {True}
        assert len(a.pool.held) == 2
        assert network.calls == []
