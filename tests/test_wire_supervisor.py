"""The worker pool with real workers: wires placed, handed over, and re-handed after a crash.

Two "nodes" (pools of workers) serve on the loopback of one test netns; pods
are netns with a TAP (dataplane_helpers). `desired` is a dict the test edits,
standing in for the wire manager; traffic is a ping between the pods.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest
from dataplane_helpers import (
    NODE,
    Pod,
    close_pods,
    make_node,
    make_pod,
    netns_prefix,
    ping,
    sh,
    wait_until,
)

from meshwire.control.wire.manager import Desired
from meshwire.control.wire.supervisor import PoolSettings, WorkerPool
from meshwire.dataplane.messages import AddWire

pytestmark = pytest.mark.root

NS = "lab"


@pytest.fixture
def prefix() -> Iterator[str]:
    with netns_prefix() as value:
        yield value


@pytest.fixture
def pods(prefix: str) -> Iterator[tuple[Pod, Pod]]:
    """Pods a (10.0.0.1) and b (10.0.0.2), each a netns with a TAP; fds closed at the end."""
    a = make_pod(prefix, "a", "10.0.0.1/24")
    b = make_pod(prefix, "b", "10.0.0.2/24")
    try:
        yield a, b
    finally:
        close_pods(a, b)


@asynccontextmanager
async def pool(
    node: str, port_base: int, desired: dict[int, Desired], count: int = 2
) -> AsyncIterator[WorkerPool]:
    settings = PoolSettings(count, NODE, port_base, report_interval=0.1, netns=node)
    started = WorkerPool(settings, desired.get)
    await started.start()
    try:
        yield started
    finally:
        await started.close()


def wire(
    pool_: WorkerPool, want: dict[int, Desired], wire_id: int, fd: int, peer: int, port: int
) -> None:
    want[wire_id] = Desired(AddWire(wire_id, NS, NODE, port, peer), fd, generation=1)
    pool_.changed(wire_id)


async def test_wires_go_to_the_worker_their_id_names_and_carry_frames(
    prefix: str, pods: tuple[Pod, Pod]
) -> None:
    a, b = pods
    node = make_node(prefix)
    want_a: dict[int, Desired] = {}
    want_b: dict[int, Desired] = {}
    async with pool(node, 52000, want_a) as pa, pool(node, 52100, want_b) as pb:
        # Wire ids 6 and 7: the two ends of one wire, both on worker (6 >> 1) % 2 == 1.
        assert (pa.index_of(6), pa.port_of(6), pb.port_of(7)) == (1, 52001, 52101)
        wire(pa, want_a, 6, a.fd, 7, pb.port_of(7))
        wire(pb, want_b, 7, b.fd, 6, pa.port_of(6))
        await wait_until(lambda: 6 in pa.counters() and 7 in pb.counters())
        assert ping(a, b.address)
        await wait_until(lambda: pa.counters()[6].tx_frames > 0)
        assert pa.held() == 1
        assert [(w, s.peer_port, s.refs) for w, s in pa.streams()] == [(1, 52101, 1)]

        # The wire goes: its worker drops it and closes the stream.
        del want_a[6]
        pa.changed(6)
        await wait_until(lambda: 6 not in pa.counters() and pa.streams() == [])
        assert not ping(a, b.address, count=1)


async def test_a_killed_worker_is_restarted_and_handed_its_wires_again(
    prefix: str, pods: tuple[Pod, Pod]
) -> None:
    a, b = pods
    node = make_node(prefix)
    want_a: dict[int, Desired] = {}
    want_b: dict[int, Desired] = {}
    async with pool(node, 52200, want_a, count=1) as pa, pool(node, 52300, want_b, 1) as pb:
        wire(pa, want_a, 2, a.fd, 3, pb.port_of(3))
        wire(pb, want_b, 3, b.fd, 2, pa.port_of(2))
        await wait_until(lambda: 2 in pa.counters() and 3 in pb.counters())
        assert ping(a, b.address)  # (blocks the loop: the pools act only before and after)
        (old_pid,) = pa.pids().values()

        os.kill(old_pid, signal.SIGKILL)

        await wait_until(lambda: pa.restarts() == 1 and 2 in pa.counters(), within=20)
        (new_pid,) = pa.pids().values()
        assert new_pid != old_pid
        assert ping(a, b.address)
        assert [(s.peer_port, s.refs) for _, s in pa.streams()] == [(52300, 1)]
        # The pod's TAP never lost its queue: control held its own fd all along.
        assert "NO-CARRIER" not in sh("ip", "-n", a.netns, "link", "show", a.tap)


async def test_a_new_fd_for_a_wire_is_handed_over_once(prefix: str) -> None:
    a = make_pod(prefix, "a", "10.0.0.1/24")
    node = make_node(prefix)
    want: dict[int, Desired] = {}
    try:
        async with pool(node, 52400, want, count=1) as pa:
            (pid,) = pa.pids().values()
            wire(pa, want, 2, a.fd, 3, 52999)
            for _ in range(3):
                pa.changed(2)  # no change: nothing is sent
            await wait_until(lambda: 2 in pa.counters())
            fds = _fds_but_sockets(pid)  # the TAP's, the stream's epoll, the worker's own
            (first,) = _tap_fds(pid)
            again = os.dup(a.fd)
            try:
                want[2] = Desired(want[2].command, again, generation=2)
                pa.changed(2)
                # The worker got the new fd (a new number) and closed the one it had.
                await wait_until(lambda: len(_tap_fds(pid)) == 1 and _tap_fds(pid) != [first])
                assert _fds_but_sockets(pid) == fds
            finally:
                os.close(again)
    finally:
        close_pods(a)


def _fds_but_sockets(pid: int) -> int:
    """How many fds process `pid` has that are not sockets. The stream's socket is
    left out: it comes and goes while the stream retries a port nothing serves."""
    return sum(1 for target in _fd_targets(pid).values() if not target.startswith("socket:"))


def _tap_fds(pid: int) -> list[str]:
    """The numbers of process `pid`'s fds on /dev/net/tun."""
    return sorted(fd for fd, target in _fd_targets(pid).items() if target == "/dev/net/tun")


def _fd_targets(pid: int) -> dict[str, str]:
    """Process `pid`'s fd numbers and what each is open on; an fd closed while this
    reads (the retrying stream's socket) is left out."""
    targets: dict[str, str] = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            targets[fd] = os.readlink(f"/proc/{pid}/fd/{fd}")
    return targets
