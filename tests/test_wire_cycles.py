"""10,000 wire create/delete cycles leave nothing behind: no fd, stream, reader or memory growth.

Two nodes' wire control sides (real `WireManager`, real `WorkerPool` with one
real worker each, the handshake carried in process by wire_helpers' Network)
serve on the loopback of one test netns; each node has a pod netns with a
persistent TAP. One cycle is a whole wire life: both drivers hand their TAP
to the manager (a fresh duplicate fd each time, as a restarted pod would), the
nodes handshake, both workers get the wire and open the stream between them,
then both ends are detached, the workers drop the wire and close the stream.

Measured every 1,000 cycles and asserted at the end against the state after
the first 1,000: open fds of control and of each worker (TAP fds, epoll fds of
stream readers, sockets: back to the idle count every time), streams and
wires the workers report (none), and the workers' resident memory (printed,
and bounded well below what a leak of any per-stream object would cost).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator

import pytest
from dataplane_helpers import close_pods, make_node, make_pod, netns_prefix, sh, wait_until
from wire_helpers import Network, grpc_row

from meshwire.control.common.queue import WorkQueue
from meshwire.control.tables.links import new_links_table
from meshwire.control.wire.handshake import Handshaker
from meshwire.control.wire.manager import WireManager
from meshwire.control.wire.supervisor import PoolSettings, WorkerPool
from meshwire.control.wire.types import TapRef

pytestmark = pytest.mark.root

CYCLES = 10_000
# A worker's RSS may grow this much from cycle 1,000 (allocators warmed up) to
# 10,000. Measured here: 0.03-0.3 MB, allocator fragmentation that goes up and
# down between samples; a leak of one stream's buffers (its 1 MiB batch buffer
# or 512 KiB receive buffer) per cycle would be gigabytes.
RSS_SLACK_KB = 1024


@pytest.fixture
def prefix() -> Iterator[str]:
    with netns_prefix() as value:
        yield value


class Node:
    def __init__(self, ip: str, netns: str, port_base: int, network: Network) -> None:
        self.ip = ip
        settings = PoolSettings(1, ip, port_base, report_interval=0.05, netns=netns)
        self.pool = WorkerPool(settings, lambda wire_id: self.manager.desired(wire_id))
        self.manager = WireManager(ip, True, self.pool, WorkQueue(), new_links_table())
        self.handshaker = Handshaker(self.manager, network, ip)

    @property
    def worker(self) -> int:
        (pid,) = self.pool.pids().values()
        return pid


async def until(condition: Callable[[], bool], within: float = 30.0) -> None:
    """Like wait_until, polling every half millisecond: a cycle takes about that long."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"not within {within}s: {condition}"
        await asyncio.sleep(0.0005)


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


@pytest.mark.timeout(900)
async def test_ten_thousand_wire_lives_leave_no_fd_stream_reader_or_memory_behind(
    prefix: str,
) -> None:
    pod_a = make_pod(prefix, "a", "10.0.0.1/24")
    pod_b = make_pod(prefix, "b", "10.0.0.2/24")
    netns = make_node(prefix)
    for ip in ("10.99.0.1", "10.99.0.2"):  # the two nodes' addresses, both on the netns loopback
        sh("ip", "-n", f"{prefix}node", "addr", "add", f"{ip}/32", "dev", "lo")
    network = Network()
    a = Node("10.99.0.1", netns, 53000, network)
    b = Node("10.99.0.2", netns, 53100, network)
    # The handshake goes in process; the workers' streams over the netns loopback.
    network.nodes[a.ip] = a  # type: ignore[assignment]
    network.nodes[b.ip] = b  # type: ignore[assignment]
    row_a = grpc_row(1, "r1", "r2", b.ip)
    row_b = grpc_row(1, "r2", "r1", a.ip)
    tap_a, tap_b = TapRef((1, 1), 1), TapRef((2, 2), 2)
    await a.pool.start()
    await b.pool.start()
    samples: list[dict[str, int]] = []
    try:

        def sample() -> dict[str, int]:
            return {
                "control_fds": fds(os.getpid()),
                "worker_a_fds": fds(a.worker),
                "worker_b_fds": fds(b.worker),
                "streams": len(a.pool.streams()) + len(b.pool.streams()),
                "worker_wires": len(a.pool.counters()) + len(b.pool.counters()),
                "rss_a_kb": rss_kb(a.worker),
                "rss_b_kb": rss_kb(b.worker),
            }

        async def settle() -> None:
            """Until the workers reported no wire and no stream, and closed the sockets of
            the streams that ended (a closed TCP connection takes a moment to go)."""
            await wait_until(lambda: a.pool.streams() == b.pool.streams() == [], within=30)
            await wait_until(lambda: not a.pool.counters() and not b.pool.counters(), within=30)
            await wait_until(lambda: (fds(a.worker), fds(b.worker)) == idle, within=30)

        await wait_until(lambda: a.pool.streams() == [] and b.pool.streams() == [], within=30)
        idle = (fds(a.worker), fds(b.worker))

        for cycle in range(1, CYCLES + 1):
            a.manager.attach(row_a, tap_a, os.dup(pod_a.fd))
            b.manager.attach(row_b, tap_b, os.dup(pod_b.fd))
            await a.handshaker.pass_over(b.ip)
            assert a.manager.ready(row_a.key) and b.manager.ready(row_b.key)
            await until(lambda: a.pool.held() == b.pool.held() == 1)  # both workers took it
            a.manager.detach(row_a.key)
            b.manager.detach(row_b.key)
            await until(lambda: a.pool.held() == b.pool.held() == 0)  # and dropped it
            await b.handshaker.pass_over(a.ip)  # the goodbye (a's is dropped: b's end is gone)
            await a.handshaker.pass_over(b.ip)
            if cycle % 1000 == 0:
                await settle()
                samples.append({"cycle": cycle, **sample()})
    finally:
        await a.pool.close()
        await b.pool.close()
        a.manager.close()
        b.manager.close()
        close_pods(pod_a, pod_b)

    print("\n[measured] wire create/delete cycles:")
    for row in samples:
        print("  " + "  ".join(f"{key} {value}" for key, value in row.items()))
    first, last = samples[0], samples[-1]
    for key in ("control_fds", "worker_a_fds", "worker_b_fds", "streams", "worker_wires"):
        assert last[key] == first[key], (key, first[key], last[key])
    assert last["streams"] == last["worker_wires"] == 0
    assert last["rss_a_kb"] - first["rss_a_kb"] < RSS_SLACK_KB
    assert last["rss_b_kb"] - first["rss_b_kb"] < RSS_SLACK_KB
