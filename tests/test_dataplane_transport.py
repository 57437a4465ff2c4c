"""The Wire stream is gRPC: the C transport and grpcio, the reference, talk both ways.

A worker's receiver (receiver.py, cext/h2receiver.c) serves a grpcio client,
and a worker's sender (sender.py, cext/h2sender.c) is served by a grpcio
server, over loopback TCP. TAPs are stood in for by SOCK_SEQPACKET socket
pairs, so no root is needed. grpcio splits messages into 16 KiB DATA frames and
paces them with its own flow-control windows, which the C side must follow.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any, NamedTuple

import grpc
import pytest
from codec_helpers import grpc_message
from dataplane_helpers import wait_until

from meshwire.dataplane import codec
from meshwire.dataplane.counters import Counters
from meshwire.dataplane.receiver import Listener
from meshwire.dataplane.sender import Sender
from meshwire.dataplane.streams import StreamKey
from meshwire.dataplane.wirec import WireTable
from meshwire.proto import meshwire_pb2, meshwire_pb2_grpc

LOOPBACK = "127.0.0.1"
NAMESPACE = (("meshwire-namespace", "lab"),)


@pytest.fixture
def tap() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(the end the worker reads and writes, the far end the test uses)."""
    near, far = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    near.setblocking(False)
    for end in (near, far):  # room for a burst of large frames
        end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    yield near, far
    near.close()
    far.close()


class Served(NamedTuple):
    table: WireTable
    listener: Listener
    channel: Any


@pytest.fixture
async def served(tap: tuple[socket.socket, socket.socket]) -> AsyncIterator[Served]:
    """A listener whose table has wire 7 of namespace lab on the TAP; and a grpcio
    channel to it."""
    table = WireTable()
    table.set(7, tap[0].fileno(), table.tag("lab"), peer_id=0)
    listener = Listener(table)
    port = listener.start(LOOPBACK, 0)
    channel = grpc.aio.insecure_channel(f"{LOOPBACK}:{port}")
    yield Served(table, listener, channel)
    await channel.close()
    listener.close()


def frames_of(size: int, count: int) -> list[bytes]:
    return [i.to_bytes(4, "big") + bytes(size - 4) for i in range(count)]


async def received(far: socket.socket, count: int) -> list[bytes]:
    return await asyncio.to_thread(lambda: [far.recv(65536) for _ in range(count)])


async def test_a_grpcio_client_s_batches_reach_their_wire_and_the_call_ends_ok(
    served: Served, tap: tuple[socket.socket, socket.socket]
) -> None:
    _, listener, channel = served
    sent = frames_of(9000, 40) + frames_of(60, 200)  # messages of 16 KiB frames and of one
    batches = [sent[i : i + 20] for i in range(0, len(sent), 20)]
    call = meshwire_pb2_grpc.WireStub(channel).Frames(metadata=NAMESPACE)

    for batch in batches:
        await call.write(meshwire_pb2.Batch(frames=codec.pack([(7, f) for f in batch])))
    assert await received(tap[1], len(sent)) == sent
    assert listener.incoming == 1
    await call.done_writing()
    summary = await call

    assert summary.batches == len(batches)
    assert await call.code() == grpc.StatusCode.OK
    await wait_until(lambda: listener.incoming == 0)


async def test_frames_of_another_namespace_are_counted_not_delivered(
    served: Served, tap: tuple[socket.socket, socket.socket]
) -> None:
    table, _, channel = served
    call = meshwire_pb2_grpc.WireStub(channel).Frames(
        metadata=(("meshwire-namespace", "elsewhere"),)
    )
    await call.write(meshwire_pb2.Batch(frames=codec.pack([(7, b"stray")])))
    await call.done_writing()

    assert (await call).batches == 1
    assert table.unknown == 1
    tap[1].setblocking(False)
    with pytest.raises(BlockingIOError):
        tap[1].recv(100)


async def test_a_malformed_message_is_counted_and_the_stream_goes_on(
    served: Served, tap: tuple[socket.socket, socket.socket]
) -> None:
    _, listener, channel = served
    raw = channel.stream_unary(
        "/meshwire.v1.Wire/Frames",
        request_serializer=None,
        response_deserializer=meshwire_pb2.FramesSummary.FromString,
    )(metadata=NAMESPACE)

    await raw.write(b"\x0b\x01x")  # a group wire type: no Batch
    await raw.write(grpc_message(codec.pack([(7, b"after")]))[5:])

    assert await received(tap[1], 1) == [b"after"]
    assert listener.malformed == 1
    await raw.done_writing()
    assert (await raw).batches == 1


async def test_another_method_or_a_compressed_call_is_refused_with_a_status(
    served: Served,
) -> None:
    _, listener, channel = served
    other = channel.unary_unary("/meshwire.v1.Wire/Other")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await other(b"")
    assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED

    call = meshwire_pb2_grpc.WireStub(channel).Frames(
        metadata=NAMESPACE, compression=grpc.Compression.Gzip
    )
    await call.done_writing()  # a write could race the refusal: grpcio then says INTERNAL
    with pytest.raises(grpc.aio.AioRpcError) as compressed:
        await call
    assert compressed.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "identity" in (compressed.value.details() or "")
    assert listener.incoming == 0


class Collector(meshwire_pb2_grpc.WireServicer):
    """A grpcio Wire service that keeps every frame it receives, and the calls' metadata."""

    def __init__(self) -> None:
        self.frames: list[tuple[int, bytes]] = []
        self.namespaces: list[str] = []
        self.ended = 0

    async def Frames(
        self, request_iterator: AsyncIterator[meshwire_pb2.Batch], context: Any
    ) -> meshwire_pb2.FramesSummary:
        self.namespaces.append(dict(context.invocation_metadata())["meshwire-namespace"])
        count = 0
        async for batch in request_iterator:
            self.frames += codec.unpack(batch.frames)
            count += 1
        self.ended += 1
        return meshwire_pb2.FramesSummary(batches=count)


@pytest.fixture
async def grpcio_server() -> AsyncIterator[tuple[Collector, int]]:
    collector = Collector()
    server = grpc.aio.server()
    meshwire_pb2_grpc.add_WireServicer_to_server(collector, server)
    port = server.add_insecure_port(f"{LOOPBACK}:0")
    await server.start()
    yield collector, port
    await server.stop(0)


async def test_a_sender_s_call_is_served_by_grpcio_and_ends_when_closed(
    grpcio_server: tuple[Collector, int], tap: tuple[socket.socket, socket.socket]
) -> None:
    collector, port = grpcio_server
    table = WireTable()
    table.set(1, tap[0].fileno(), table.tag("lab"), peer_id=99)
    sender = Sender(
        StreamKey("lab", LOOPBACK, port), table, lambda _: tap[0].fileno(), 256, 1 << 20
    )
    sender.set_wires(frozenset({1}))
    sent = frames_of(9000, 600) + frames_of(60, 2000)  # 5.5 MB: beyond grpcio's first windows

    await asyncio.to_thread(lambda: [tap[1].send(f) for f in sent])
    await wait_until(lambda: len(collector.frames) == len(sent))
    batches = sender.batches
    await sender.close()

    assert collector.frames == [(99, f) for f in sent]
    assert collector.namespaces == ["lab"]
    assert collector.ended == 1
    assert 0 < batches < len(sent)  # frames went in batches


class StallingProxy:
    """A TCP relay to `port` that stops taking the caller's bytes while `flowing` is clear."""

    def __init__(self, port: int) -> None:
        self.flowing = asyncio.Event()
        self.flowing.set()
        self._port = port
        self._server: Any = None

    async def start(self) -> int:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)  # fills early
        sock.bind((LOOPBACK, 0))
        self._server = await asyncio.start_server(self._relay, sock=sock)
        return int(sock.getsockname()[1])

    async def close(self) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(LOOPBACK, self._port)

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter, gated: bool) -> None:
            while True:
                if gated:
                    await self.flowing.wait()
                data = await src.read(65536)
                if not data:
                    break
                dst.write(data)
                await dst.drain()
            dst.close()

        await asyncio.gather(copy(reader, up_writer, True), copy(up_reader, writer, False))


class Ends(NamedTuple):
    """Wire 1 of the sending worker, whose far end is wire 7 of the receiving one."""

    tx_table: WireTable
    tx_near: socket.socket  # the sending worker's TAP
    tx_far: socket.socket  # where the test puts frames in
    rx_table: WireTable
    rx_near: socket.socket  # the receiving worker's TAP
    rx_far: socket.socket  # where the test takes frames out


@pytest.fixture
def ends() -> Iterator[Ends]:
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET) for _ in range(2)]
    (tx_near, tx_far), (rx_near, rx_far) = pairs
    for near, _ in pairs:
        near.setblocking(False)
    rx_table, tx_table = WireTable(), WireTable()
    rx_table.set(7, rx_near.fileno(), rx_table.tag("lab"), peer_id=1)
    tx_table.set(1, tx_near.fileno(), tx_table.tag("lab"), peer_id=7)
    yield Ends(tx_table, tx_near, tx_far, rx_table, rx_near, rx_far)
    for a, b in pairs:
        a.close()
        b.close()


def sender_of(ends: Ends, key: StreamKey) -> Sender:
    """A sender of stream `key` carrying wire 1."""
    sender = Sender(key, ends.tx_table, lambda _: ends.tx_near.fileno(), 256, 1 << 20)
    sender.set_wires(frozenset({1}))
    return sender


async def test_a_stalled_receiver_makes_the_sender_keep_its_unsent_bytes_in_order(
    ends: Ends,
) -> None:
    tx_table, _, tx_far, rx_table, _, rx_far = ends
    listener = Listener(rx_table)
    proxy = StallingProxy(listener.start(LOOPBACK, 0))
    sender = sender_of(ends, StreamKey("lab", LOOPBACK, await proxy.start()))
    sent = frames_of(9000, 1500)  # 13.5 MB: far beyond what the sockets between buffer
    got: list[bytes] = []
    try:
        proxy.flowing.clear()
        writing = asyncio.create_task(asyncio.to_thread(lambda: [tx_far.send(f) for f in sent]))
        await asyncio.sleep(0.5)  # the sender fills the socket, keeps the rest, stops reading
        proxy.flowing.set()
        await writing

        def arrived() -> bool:
            rx_far.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                while True:
                    got.append(rx_far.recv(65536))
            c = rx_table.counters(7)
            return c is not None and c.rx_frames + c.rx_drops == len(sent)

        await wait_until(arrived, within=30)
        arrived()
    finally:
        await sender.close()
        await proxy.close()
        listener.close()

    assert got, "nothing was delivered"
    assert all(f in sent for f in got)  # whole frames, none torn
    indexes = [int.from_bytes(f[:4], "big") for f in got]
    assert indexes == sorted(indexes)  # in order; the stream itself lost nothing
    assert tx_table.counters(1) == Counters(tx_frames=len(sent), tx_bytes=9000 * len(sent))


async def test_a_sender_reaches_a_receiver_on_a_node_with_an_ipv6_address(ends: Ends) -> None:
    listener = Listener(ends.rx_table)
    sender = sender_of(ends, StreamKey("lab", "::1", listener.start("::1", 0)))
    sent = frames_of(60, 100)
    try:
        await asyncio.to_thread(lambda: [ends.tx_far.send(f) for f in sent])
        got = await received(ends.rx_far, len(sent))
    finally:
        await sender.close()
        listener.close()

    assert got == sent


# Bound on a close that must not hang: ten times CLOSE_GRACE, yet under the TCP user
# timeout (20 s), which would end a call to a cut-off peer by itself. Not a timing check.
CLOSE_LIMIT = 10.0


async def closes(sender: Sender) -> None:
    """Asserts that `sender.close()` returns within CLOSE_LIMIT. (Not asyncio.timeout:
    a close stuck awaiting its call would swallow the timeout's cancellation.)"""
    closing = asyncio.ensure_future(sender.close())
    await asyncio.wait({closing}, timeout=CLOSE_LIMIT)
    assert closing.done(), f"close() still waiting after {CLOSE_LIMIT}s"
    closing.result()


async def test_closing_a_stream_to_a_peer_cut_off_mid_call_does_not_hang(ends: Ends) -> None:
    listener = Listener(ends.rx_table)
    proxy = StallingProxy(listener.start(LOOPBACK, 0))
    sender = sender_of(ends, StreamKey("lab", LOOPBACK, await proxy.start()))
    try:
        sent = frames_of(60, 10)
        await asyncio.to_thread(lambda: [ends.tx_far.send(f) for f in sent])
        assert await received(ends.rx_far, len(sent)) == sent  # the call is up
        proxy.flowing.clear()  # the peer node is cut off: nothing reaches it, nothing answers

        await closes(sender)  # its end of the call can never be acknowledged
    finally:
        proxy.flowing.set()
        await proxy.close()
        listener.close()


async def test_closing_a_stream_to_a_peer_that_never_answers_does_not_hang(ends: Ends) -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # a dead worker's port: TCP accepted, no HTTP/2 ever

    server = await asyncio.start_server(mute, LOOPBACK, 0)
    port = server.sockets[0].getsockname()[1]
    sender = sender_of(ends, StreamKey("lab", LOOPBACK, port))
    try:
        await wait_until(lambda: bool(accepted), within=CLOSE_LIMIT)
        await closes(sender)
    finally:
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()
