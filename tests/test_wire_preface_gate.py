"""The gate before a worker's HTTP/2 receiver (dataplane/receiver.py): prefaces under way
are capped per source address and in total, garbage is closed at once, and a flood
leaves the wires already made carrying frames.

A worker with a long preface timeout (so nothing expires while the test counts) is
flooded from several loopback addresses of the test's netns with connections that
send a few bytes of the preface and stall (slowloris). Exactly PENDING_PER_SOURCE of
one address's and PENDING_MAX in all stay open; the others are closed at once and
counted. Meanwhile a wire through the same worker still passes pings.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from dataplane_helpers import (
    NODE,
    close_pods,
    connect,
    make_node,
    make_pod,
    netns_prefix,
    ping,
    wait_until,
    workers,
)

from meshwire.base.netns_thread import call_in_netns
from meshwire.dataplane import preface
from meshwire.dataplane.handle import WorkerHandle
from meshwire.dataplane.receiver import PENDING_MAX, PENDING_PER_SOURCE

pytestmark = pytest.mark.root

# Long enough that no stalled preface of the test expires while it counts.
PATIENT = 600.0


@pytest.fixture
def prefix() -> Iterator[str]:
    with netns_prefix() as p:
        yield p


def key_file(tmp_path: Path) -> str:
    path = tmp_path / "wire.key"
    path.write_text("11" * 32 + "\n")
    return str(path)


def stalled(node: str, source: str, port: int, count: int, start: bytes) -> list[socket.socket]:
    """`count` connections from `source` to the worker, each having sent `start`."""

    def open_all() -> list[socket.socket]:
        socks = []
        for _ in range(count):
            sock = socket.socket()
            sock.bind((source, 0))
            sock.connect((NODE, port))
            sock.sendall(start)
            socks.append(sock)
        return socks

    return call_in_netns(node, open_all)


def closed(sock: socket.socket) -> bool:
    """Whether the worker closed the connection (EOF or reset), without waiting."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def refused(handle: WorkerHandle) -> int:
    report = handle.streams
    return report.refused if report is not None else 0


async def test_stalled_prefaces_are_capped_per_source_and_in_total_and_wires_keep_flowing(
    prefix: str, tmp_path: Path
) -> None:
    a = make_pod(prefix, "a", "10.0.0.1/24")
    b = make_pod(prefix, "b", "10.0.0.2/24")
    node = make_node(prefix)
    config = {"wire_key": key_file(tmp_path), "preface_timeout": PATIENT}
    flood: list[socket.socket] = []
    try:
        async with workers(node, 2, **config) as (node_a, node_b):
            await connect(a, node_a, 1, b, node_b, 2)
            await wait_until(lambda: ping(a, b.address), within=60)
            port = node_b.data_port
            start = preface.MAGIC[:3]

            # One address: PENDING_PER_SOURCE stay, the rest are closed.
            extra = 8
            one = await asyncio.to_thread(
                stalled, node, "127.0.1.1", port, PENDING_PER_SOURCE + extra, start
            )
            flood += one
            await wait_until(lambda: sum(map(closed, one)) >= extra, within=60)
            assert sum(not closed(sock) for sock in one) == PENDING_PER_SOURCE

            # Many addresses: PENDING_MAX in all.
            sources = PENDING_MAX // PENDING_PER_SOURCE + 2
            for n in range(2, 2 + sources):
                flood += await asyncio.to_thread(
                    stalled, node, f"127.0.1.{n}", port, PENDING_PER_SOURCE, start
                )
            expected_closed = len(flood) - PENDING_MAX
            await wait_until(lambda: sum(map(closed, flood)) >= expected_closed, within=60)
            assert sum(not closed(sock) for sock in flood) == PENDING_MAX
            await wait_until(lambda: refused(node_b) >= expected_closed, within=60)

            # The wire made before the flood still carries frames.
            await wait_until(lambda: ping(a, b.address), within=60)
    finally:
        for sock in flood:
            sock.close()
        close_pods(a, b)


async def test_garbage_and_plain_http2_are_closed_before_any_answer(
    prefix: str, tmp_path: Path
) -> None:
    node = make_node(prefix)
    async with workers(node, 1, wire_key=key_file(tmp_path)) as (worker,):
        socks = await asyncio.to_thread(
            stalled, node, NODE, worker.data_port, 1, preface.HTTP2_START + bytes(64)
        )
        socks += await asyncio.to_thread(
            stalled, node, NODE, worker.data_port, 1, b"GET / HTTP/1.1\r\n\r\n"
        )
        try:
            await wait_until(lambda: all(map(closed, socks)), within=60)
            for sock in socks:
                sock.settimeout(10)
                # Not a byte came back: no HTTP/2 SETTINGS, no receiver ever answered.
                with contextlib.suppress(ConnectionResetError):
                    assert sock.recv(4096) == b""
            await wait_until(lambda: refused(worker) >= 2, within=60)
        finally:
            for sock in socks:
                sock.close()
