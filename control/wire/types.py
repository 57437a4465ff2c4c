"""The contracts of the gRPC wire's control side (docs/design.md §5).

- `WireEnds`: what the grpc link driver (wire/grpc_driver.py, in a netlink thread)
  tells the wire manager about the TAPs it realises.
- `PeerClient`: the Peer RPCs towards another node, so the handshake loop is
  tested without a network.
- `TapRef`, `FarEnd`: the facts those exchange.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from meshwire.control.tables.links import LinkRow
from meshwire.proto import meshwire_pb2


@dataclass(frozen=True, slots=True)
class TapRef:
    """Which TAP an fd is attached to: the pod netns (st_dev, st_ino) and the ifindex there.

    Equal refs mean the same interface: a TAP deleted and created again, or one
    in a pod's new netns after a restart, gets a different ref.
    """

    netns: tuple[int, int]
    ifindex: int


@dataclass(frozen=True, slots=True)
class FarEnd:
    """The peer node's end of a wire, as its handshake answer or offer gave it."""

    node_ip: str
    # The worker on the peer node that owns the far end (Wire service port).
    data_port: int
    # The far end's wire id: frames this node sends for the wire carry it.
    wire_id: int


class WireEnds(Protocol):
    """Called from netlink threads; each call blocks until the manager has acted.

    Raises `LinkError` (transient) when the manager is closed or does not answer.
    """

    def held(self, key: str) -> TapRef | None:
        """The TAP whose fd the manager holds for row `key`, None if it holds none."""
        ...

    def attach(self, row: LinkRow, tap: TapRef, fd: int | None) -> None:
        """Make `row` the wire's desired state, with `fd` (attached to `tap`) as its TAP.

        A new `fd` replaces any fd held for `row.key`, which the manager closes;
        the manager owns `fd` from the call on, even when the call raises. None
        keeps the fd held on `tap`; raises `LinkError` if none is held there.
        """
        ...

    def detach(self, key: str) -> None:
        """Forget row `key`'s wire: its worker stops moving its frames, its fd is
        closed and the far node is told. A key with no wire is success."""
        ...


class PeerError(Exception):
    """A Peer RPC that failed as a whole (unreachable node, timeout, refused request)."""


class PeerClient(Protocol):
    async def create_wires(
        self, node_ip: str, request: meshwire_pb2.CreateWiresRequest
    ) -> meshwire_pb2.CreateWiresReply:
        """Raises PeerError naming the node and what failed."""
        ...

    async def delete_wires(
        self, node_ip: str, request: meshwire_pb2.DeleteWiresRequest
    ) -> meshwire_pb2.DeleteWiresReply:
        """Raises PeerError naming the node and what failed."""
        ...

    async def close(self) -> None: ...
