"""The Peer RPCs towards other nodes, over gRPC (proto/meshwire.proto).

One channel per peer node, opened on first use and kept: a node has a few
peers, and a kept channel reconnects by itself after the peer restarts.
Every call has the per-RPC timeout (`peer.rpc_timeout`) and fails fast on a
node that is down (no wait-for-ready), so one dead node costs its own wires a
retry and nothing else.

With credentials (config `auth`), channels run on mutual TLS with this node's
certificate, and the peer must present one naming the address called. When the
CA files change, the next call opens a new channel with the new credentials;
the old one is closed once its calls in flight are done.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from meshwire.base import hostport
from meshwire.control.auth.tls import NodeCredentials
from meshwire.control.wire.types import PeerError
from meshwire.proto import meshwire_pb2, meshwire_pb2_grpc

# Reconnect quickly after a peer restarts (gRPC's default starts at 1 s). Not
# `grpc.min_reconnect_backoff_ms`: gRPC core takes it as the minimum connect
# timeout (20 s by default), so a small value fails every connection whose TCP
# and HTTP/2 handshakes take longer than that (a busy node, a slow underlay).
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
]
# A replaced channel's calls in flight get this long (s) to finish.
REPLACED_GRACE = 10.0


class GrpcPeerClient:
    def __init__(
        self, port: int, timeout: float, credentials: NodeCredentials | None = None
    ) -> None:
        """`port`: the peers' `peer.listen` port (the same on every node, as in meshnet)."""
        self._port = port
        self._timeout = timeout
        self._credentials = credentials
        # node ip -> (channel, credentials generation it was opened with)
        self._channels: dict[str, tuple[Any, int]] = {}
        self._retiring: set[asyncio.Task[None]] = set()

    async def create_wires(
        self, node_ip: str, request: meshwire_pb2.CreateWiresRequest
    ) -> meshwire_pb2.CreateWiresReply:
        reply: meshwire_pb2.CreateWiresReply = await self._call(node_ip, "CreateWires", request)
        return reply

    async def delete_wires(
        self, node_ip: str, request: meshwire_pb2.DeleteWiresRequest
    ) -> meshwire_pb2.DeleteWiresReply:
        reply: meshwire_pb2.DeleteWiresReply = await self._call(node_ip, "DeleteWires", request)
        return reply

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        for channel, _ in channels.values():
            await channel.close()
        for task in list(self._retiring):
            task.cancel()
        await asyncio.gather(*self._retiring, return_exceptions=True)

    def _channel(self, node_ip: str, address: str) -> Any:
        generation = 0
        if self._credentials is not None:
            self._credentials.refresh()
            generation = self._credentials.generation
        kept = self._channels.get(node_ip)
        if kept is not None and kept[1] == generation:
            return kept[0]
        if self._credentials is not None:
            channel = grpc.aio.secure_channel(
                address, self._credentials.channel_credentials(), CHANNEL_OPTIONS
            )
        else:
            channel = grpc.aio.insecure_channel(address, CHANNEL_OPTIONS)
        self._channels[node_ip] = (channel, generation)
        if kept is not None:
            task = asyncio.get_running_loop().create_task(kept[0].close(REPLACED_GRACE))
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)
        return channel

    async def _call(self, node_ip: str, method: str, request: Any) -> Any:
        address = hostport.join(node_ip, self._port)
        channel = self._channel(node_ip, address)
        stub = meshwire_pb2_grpc.PeerStub(channel)  # type: ignore[no-untyped-call]
        try:
            return await getattr(stub, method)(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as exc:
            raise PeerError(f"{method} to {address}: {exc.code().name}: {exc.details()}") from None
