"""The wire races KNE #743 fixed, as scenarios on two or three nodes' wire control sides.

Each test names the race from the user's side and asserts what a user would
see: which wires are ready (carrier up), what each node's worker holds (the
AddWire it was given, so which stream the frames take and each stream's
refcount), which fds are still open, and what the nodes said to each other.
Real processes and TAPs are in test_scenario_grpc_lab.py; here the manager and
handshake loop are driven by hand, so every interleaving is chosen.
"""

from __future__ import annotations

import asyncio

from wire_helpers import DATA_PORT, NS, grpc_row, is_open, joined, wire_nodes


async def test_both_nodes_reconciling_one_link_at_once_get_one_tap_and_one_worker_entry() -> None:
    with wire_nodes("a", "b") as (_network, (a, b)):
        row_a = grpc_row(1, "r1", "r2", b.ip)
        row_b = grpc_row(1, "r2", "r1", a.ip)
        fd_a, fd_b = a.attach(row_a), b.attach(row_b)

        # Both handshakes are out at the same time, each answered by the other's manager.
        await asyncio.gather(a.handshake(b), b.handshake(a))

        assert a.manager.ready(row_a.key) and b.manager.ready(row_b.key)
        assert len(a.manager) == len(b.manager) == 1
        # Each worker holds the wire once, with the one fd the driver handed over.
        assert list(a.pool.held) == [row_a.wire_id]
        assert a.pool.held[row_a.wire_id].fd == fd_a
        assert b.pool.held[row_b.wire_id].fd == fd_b
        # Answering twice changed nothing: one command per worker.
        assert (a.pool.commands, b.pool.commands) == (1, 1)
        assert a.pool.streams() == {(NS, b.ip, DATA_PORT): 1}
        assert a.pool.held[row_a.wire_id].command.peer_wire_id == row_b.wire_id


async def test_a_pod_restarted_in_a_new_netns_leaves_no_old_tap_fd_in_use() -> None:
    with wire_nodes("a", "b") as (_network, (a, b)):
        row_a = grpc_row(1, "r1", "r2", b.ip, netns="/proc/100/ns/net")
        b.attach(grpc_row(1, "r2", "r1", a.ip))
        old_fd = a.attach(row_a)
        await a.handshake(b)
        assert a.manager.ready(row_a.key)

        # r1 restarts: same link, new netns, a new TAP there.
        restarted = grpc_row(1, "r1", "r2", b.ip, netns="/proc/200/ns/net")
        new_fd = a.attach(restarted, generation=1)

        assert not is_open(old_fd)
        assert a.pool.held[row_a.wire_id].fd == new_fd
        # The far end did not change: the wire stays joined, nothing is asked again.
        assert a.manager.ready(row_a.key)
        assert a.pool.streams() == {(NS, b.ip, DATA_PORT): 1}


async def test_a_wire_whose_peer_is_not_up_yet_holds_no_stream_until_it_is() -> None:
    with wire_nodes("a", "b") as (network, (a, b)):
        row_a = grpc_row(1, "r1", "r2", b.ip)
        a.attach(row_a)
        network.down.add(b.ip)
        await a.handshake(b)

        assert not a.manager.ready(row_a.key)
        assert a.pool.streams() == {}
        assert a.links.health(row_a.key).handshake == (
            f"peer node {b.ip}: CreateWires to {b.ip}:51111: UNAVAILABLE: connection refused"
        )

        network.down.clear()
        await a.handshake(b)  # b is up, but r2 is not realised there yet
        assert not a.manager.ready(row_a.key)
        assert a.links.health(row_a.key).handshake == ""  # pending is not a problem

        b.attach(grpc_row(1, "r2", "r1", a.ip))
        await b.handshake(a)  # b calls back once its end exists
        assert a.manager.ready(row_a.key)
        assert a.pool.streams() == {(NS, b.ip, DATA_PORT): 1}

        a.manager.detach(row_a.key)
        assert a.pool.streams() == {}


async def test_a_wire_torn_down_before_its_handshake_completed_leaves_nothing_behind() -> None:
    with wire_nodes("a", "b") as (network, (a, b)):
        row_a = grpc_row(1, "r1", "r2", b.ip)
        fd = a.attach(row_a)
        await a.handshake(b)  # answered pending: r2 is not on b yet
        assert not a.manager.ready(row_a.key)

        a.manager.detach(row_a.key)  # the pod is deleted meanwhile

        assert not is_open(fd)
        assert len(a.manager) == 0
        assert a.pool.held == {}
        assert a.manager.offers_for(b.ip) == []
        await a.handshake(b)  # only the goodbye is left to say
        assert network.count("DeleteWires") == 1
        assert not a.manager.needs_handshake(b.ip)


async def test_a_wire_whose_far_end_went_away_is_rebuilt_when_it_comes_back() -> None:
    with wire_nodes("a", "b") as (_network, (a, b)):
        row_a, row_b = await joined(a, b)
        assert a.manager.ready(row_a.key) and b.manager.ready(row_b.key)

        b.manager.detach(row_b.key)  # r2 is deleted on b
        await b.handshake(a)  # b tells a

        assert not a.manager.ready(row_a.key)
        assert a.pool.held == {}  # no worker sends into the void
        assert a.manager.needs_handshake(b.ip)

        b.attach(row_b, generation=1)  # r2 is back
        await b.handshake(a)
        assert a.manager.ready(row_a.key) and b.manager.ready(row_b.key)
        assert a.pool.streams() == {(NS, b.ip, DATA_PORT): 1}


async def test_a_peer_pod_moved_to_another_node_takes_its_wire_to_the_new_stream() -> None:
    with wire_nodes("a", "b", "c") as (_network, (a, b, c)):
        row_a = grpc_row(1, "r1", "r2", b.ip)
        a.attach(row_a)
        b.attach(grpc_row(1, "r2", "r1", a.ip))
        await a.handshake(b)
        assert a.pool.streams() == {(NS, b.ip, DATA_PORT): 1}

        # r2 moves from b to c: b's end goes, c's end comes, a's row names c.
        b.manager.detach(grpc_row(1, "r2", "r1", a.ip).key)
        c.attach(grpc_row(1, "r2", "r1", a.ip))
        moved = grpc_row(1, "r1", "r2", c.ip)
        a.attach(moved, generation=0)

        assert not a.manager.ready(moved.key)
        assert a.pool.streams() == {}  # the old stream lost its reference at once
        await asyncio.gather(a.handshake(b), a.handshake(c), b.handshake(a), c.handshake(a))

        assert a.manager.ready(moved.key) and c.manager.ready(moved.key.replace("r1", "r2"))
        assert a.pool.streams() == {(NS, c.ip, DATA_PORT): 1}
        held = a.pool.held[moved.wire_id].command
        assert (held.peer_node, held.peer_wire_id) == (c.ip, grpc_row(1, "r2", "r1", a.ip).wire_id)
        # b's late goodbye about its old end changed nothing on a.
        assert a.manager.ready(moved.key)


async def test_a_goodbye_for_an_end_that_is_back_meanwhile_is_not_sent() -> None:
    with wire_nodes("a", "b") as (network, (a, b)):
        row_a, row_b = await joined(a, b)

        # r2 restarts on b: its end is detached and attached again before b's
        # handshake loop gets to node a.
        b.manager.detach(row_b.key)
        b.attach(row_b, generation=1)
        await b.handshake(a)

        assert network.count("DeleteWires") == 0
        assert a.manager.ready(row_a.key) and b.manager.ready(row_b.key)


async def test_a_verify_pass_finds_a_far_end_that_lost_its_wire_without_saying() -> None:
    with wire_nodes("a", "b") as (network, (a, b)):
        row_a, row_b = await joined(a, b)
        network.down.add(a.ip)
        b.manager.detach(row_b.key)
        await b.handshake(a)  # the goodbye is lost
        assert a.manager.ready(row_a.key)
        network.down.clear()

        a.manager.verify_all()
        await a.handshake(b)

        assert not a.manager.ready(row_a.key)
        assert a.pool.held == {}


async def test_an_unreachable_node_delays_only_its_own_wires() -> None:
    with wire_nodes("a", "b", "c") as (network, (a, b, c)):
        to_b, to_c = grpc_row(1, "r1", "r2", b.ip), grpc_row(2, "r1", "r3", c.ip)
        a.attach(to_b)
        a.attach(to_c)
        c.attach(grpc_row(2, "r3", "r1", a.ip))
        network.down.add(b.ip)

        await asyncio.gather(a.handshake(b), a.handshake(c))

        assert a.manager.ready(to_c.key) and not a.manager.ready(to_b.key)
        assert a.manager.needs_handshake(b.ip) and not a.manager.needs_handshake(c.ip)
        assert a.links.health(to_b.key).handshake.startswith(f"peer node {b.ip}")
        assert a.links.health(to_c.key).handshake == ""


async def test_handshakes_towards_one_node_are_batched() -> None:
    with wire_nodes("a", "b") as (network, (a, b)):
        for uid in range(1, 301):
            a.attach(grpc_row(uid, f"p{uid}", f"q{uid}", b.ip))
            b.attach(grpc_row(uid, f"q{uid}", f"p{uid}", a.ip))

        await a.handshake(b)

        assert network.calls == [("CreateWires", b.ip, 300)]
        assert a.manager.counts() == {"ready": 300, "waiting": 0}
        assert b.manager.counts() == {"ready": 300, "waiting": 0}
        assert a.pool.streams() == {(NS, b.ip, DATA_PORT): 300}


async def test_nodes_whose_offloads_differ_report_it_and_never_join() -> None:
    with wire_nodes("a", "b") as (_network, (a, b)):
        b.manager.offloads = False
        row_a = grpc_row(1, "r1", "r2", b.ip)
        a.attach(row_a)
        b.attach(grpc_row(1, "r2", "r1", a.ip))

        await a.handshake(b)

        assert not a.manager.ready(row_a.key)
        problem = a.links.health(row_a.key).handshake
        assert "dataplane.offloads is on on node 169.254.0.11 and off here" in problem
