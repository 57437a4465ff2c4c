"""Nodes of gRPC wires without a network: managers joined by an in-process Peer client.

`WireNode` is one node's wire control side (the real `WireManager` and
`Handshaker`) with a `PerfectPool` standing in for the worker pool: on every
`changed(wire_id)` it makes its "worker" hold exactly `desired(wire_id)` and
counts the commands that took, as the real pool does with real workers.
`Network` carries Peer RPCs between nodes' managers and can cut a node off.
TAP fds are pipe ends: carrier ioctls fail on them harmlessly, and a closed
one is seen with `is_open`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from slot_helpers import slot

from meshwire.control.common.ids import wire_id
from meshwire.control.common.queue import WorkQueue
from meshwire.control.tables.links import End, LinkKind, LinkRow, new_links_table
from meshwire.control.wire.handshake import Handshaker
from meshwire.control.wire.manager import Desired, WireManager
from meshwire.control.wire.types import PeerError, TapRef
from meshwire.proto import meshwire_pb2

DATA_PORT = 51112
NS = "lab"


def grpc_row(uid: int, pod: str, peer: str, peer_node_ip: str, netns: str = "") -> LinkRow:
    """`pod`'s end of link `lab/uid` to `peer` on the node at `peer_node_ip`."""
    return LinkRow(
        NS,
        uid,
        LinkKind.GRPC,
        End(pod, netns or f"/run/netns/{pod}", "eth1", "10.0.0.1/24"),
        End(peer, "", "eth1", "10.0.0.2/24"),
        1500,
        peer_node_ip,
        wire_id=wire_id(slot(NS), uid, pod, peer),
    )


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


@dataclass
class PerfectPool:
    """A worker pool whose single "worker" always holds exactly what is desired."""

    # The manager's `desired`, set once the manager exists.
    desired: Callable[[int], Desired | None] | None = None
    # wire id -> the Desired the worker holds.
    held: dict[int, Desired] = field(default_factory=dict)
    commands: int = 0

    def port_of(self, wire_id: int) -> int:
        return DATA_PORT

    def changed(self, wire_id: int) -> None:
        assert self.desired is not None
        want = self.desired(wire_id)
        have = self.held.get(wire_id)
        if want == have:
            return
        self.commands += 1
        if want is None:
            del self.held[wire_id]
        else:
            self.held[wire_id] = want

    def streams(self) -> dict[tuple[str, str, int], int]:
        """(namespace, peer node, peer port) -> wires using the stream, as a worker counts."""
        refs: dict[tuple[str, str, int], int] = {}
        for desired in self.held.values():
            c = desired.command
            key = (c.namespace, c.peer_node, c.peer_port)
            refs[key] = refs.get(key, 0) + 1
        return refs


class WireNode:
    def __init__(self, name: str, ip: str, network: Network, offloads: bool = True) -> None:
        self.name = name
        self.ip = ip
        self.pool = PerfectPool()
        # The node's links table: its rows' handshake problems are written here.
        self.links = new_links_table()
        self.manager = WireManager(ip, offloads, self.pool, WorkQueue(), self.links)
        self.pool.desired = self.manager.desired
        self.handshaker = Handshaker(self.manager, network, name)
        self._fds: list[int] = []
        network.nodes[ip] = self

    def tap(self, pod: str, generation: int = 0) -> tuple[TapRef, int]:
        """A TapRef for `pod`'s TAP (a new `generation` is a new TAP) and an fd on it."""
        read, write = os.pipe()
        os.close(write)
        self._fds.append(read)
        return TapRef((hash(pod) & 0xFFFF, generation), 10 + generation), read

    def attach(self, row: LinkRow, generation: int = 0) -> int:
        """The driver realised `row`'s TAP (generation: which TAP), a row of the node's links
        table; returns the fd handed over."""
        if self.links.get(row.key) != row:
            self.links.upsert(row.key, row)
        tap, fd = self.tap(row.local.pod, generation)
        self.manager.attach(row, tap, fd)
        return fd

    async def handshake(self, peer: WireNode) -> None:
        await self.handshaker.pass_over(peer.ip)

    def close(self) -> None:
        self.manager.close()
        for fd in self._fds:
            if is_open(fd):
                os.close(fd)


@dataclass
class Network:
    """In-process Peer RPCs between WireNodes; a node in `down` does not answer."""

    nodes: dict[str, WireNode] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)
    calls: list[tuple[str, str, int]] = field(default_factory=list)

    def _reach(self, node_ip: str, method: str, wires: int) -> WireNode:
        self.calls.append((method, node_ip, wires))
        if node_ip in self.down or node_ip not in self.nodes:
            raise PeerError(f"{method} to {node_ip}:51111: UNAVAILABLE: connection refused")
        return self.nodes[node_ip]

    async def create_wires(
        self, node_ip: str, request: meshwire_pb2.CreateWiresRequest
    ) -> meshwire_pb2.CreateWiresReply:
        await asyncio.sleep(0)  # the RPC is out: the other node's loop may run meanwhile
        node = self._reach(node_ip, "CreateWires", len(request.wires))
        answers = node.manager.offered(request.node_ip, request.offloads, request.wires)
        await asyncio.sleep(0)
        return meshwire_pb2.CreateWiresReply(wires=answers)

    async def delete_wires(
        self, node_ip: str, request: meshwire_pb2.DeleteWiresRequest
    ) -> meshwire_pb2.DeleteWiresReply:
        await asyncio.sleep(0)
        node = self._reach(node_ip, "DeleteWires", len(request.wires))
        node.manager.withdrawn(request.node_ip, request.wires)
        return meshwire_pb2.DeleteWiresReply()

    async def close(self) -> None:
        return None

    def count(self, method: str) -> int:
        return sum(1 for m, _, _ in self.calls if m == method)


async def joined(a: WireNode, b: WireNode) -> tuple[LinkRow, LinkRow]:
    """Link lab/1 between r1 on `a` and r2 on `b`, both ends realised and joined."""
    row_a, row_b = grpc_row(1, "r1", "r2", b.ip), grpc_row(1, "r2", "r1", a.ip)
    a.attach(row_a)
    b.attach(row_b)
    await a.handshake(b)
    return row_a, row_b


@contextmanager
def wire_nodes(*names: str) -> Iterator[tuple[Network, list[WireNode]]]:
    """Nodes `names` at 169.254.0.11, .12, ... on one Network; closed at exit."""
    network = Network()
    nodes = [WireNode(name, f"169.254.0.{11 + i}", network) for i, name in enumerate(names)]
    try:
        yield network, nodes
    finally:
        for node in nodes:
            node.close()
