"""Issue #39: bytes a peer sends back never kill the sender of a stream, nor does an
error the sender did not foresee while connecting.

The peer answers a stream's call with trailers its owner chose; a sender
that dies on them (a `grpc-message` that is not UTF-8) stalls every wire of
the stream. Here a hand-made HTTP/2 peer answers each call with such a
message and the sender keeps reopening its stream.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import AsyncIterator

import pytest

from meshwire.dataplane import sender as sender_module
from meshwire.dataplane.sender import Sender
from meshwire.dataplane.streams import StreamKey
from meshwire.dataplane.wirec import WireTable

LOOPBACK = "127.0.0.1"
HEADERS, RST_STREAM, SETTINGS = 0x1, 0x3, 0x4
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
NOT_UTF8 = b"\xff\xfe refused \xc3"


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream)
        + payload
    )


def literal(name: bytes, value: bytes) -> bytes:
    """An HPACK literal header field without indexing, new name, no Huffman coding
    (both lengths under 127)."""
    return bytes([0, len(name)]) + name + bytes([len(value)]) + value


# A trailers-only answer: HTTP 200 (static index 8), a failed grpc-status, a bad message.
ANSWER = bytes([0x88]) + literal(b"grpc-status", b"2") + literal(b"grpc-message", NOT_UTF8)


class RudePeer:
    """An HTTP/2 server answering every call with `ANSWER`; counts the calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readexactly(24)  # the client's connection preface
            writer.write(frame(SETTINGS, 0, 0, b""))
            while True:
                length, kind, flags, stream = _header(await reader.readexactly(9))
                await reader.readexactly(length)
                if kind == SETTINGS and not flags & ACK:
                    writer.write(frame(SETTINGS, ACK, 0, b""))
                elif kind == HEADERS:
                    self.calls += 1
                    writer.write(frame(HEADERS, END_STREAM | END_HEADERS, stream, ANSWER))
                    # As a gRPC server ends a call whose request is still open: NO_ERROR.
                    writer.write(frame(RST_STREAM, 0, stream, bytes(4)))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def _header(raw: bytes) -> tuple[int, int, int, int]:
    length = int.from_bytes(raw[:3], "big")
    return length, raw[3], raw[4], int.from_bytes(raw[5:9], "big") & 0x7FFFFFFF


@pytest.fixture
async def rude_peer() -> AsyncIterator[tuple[RudePeer, int]]:
    peer = RudePeer()
    server = await asyncio.start_server(peer.serve, LOOPBACK, 0)
    yield peer, int(server.sockets[0].getsockname()[1])
    server.close()
    await server.wait_closed()


async def calls_made(peer: RudePeer, port: int, count: int) -> None:
    """A sender of a stream to `peer` runs until the peer saw `count` calls (30 s at most)."""
    sender = Sender(StreamKey("lab", LOOPBACK, port), WireTable(), lambda _: -1, 256, 1 << 20)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while peer.calls < count:
            assert loop.time() < deadline, f"the sender stopped after {peer.calls} call(s)"
            await asyncio.sleep(0.05)
    finally:
        await sender.close()


async def test_a_non_utf8_grpc_message_does_not_kill_the_sender(
    rude_peer: tuple[RudePeer, int], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="meshwire.dataplane.sender")
    peer, port = rude_peer
    # Each call ends on the bad message; a living sender opens the next one.
    await calls_made(peer, port, 3)
    assert "grpc-status 2: \ufffd\ufffd refused" in caplog.text


async def test_an_unforeseen_error_while_connecting_does_not_kill_the_sender(
    rude_peer: tuple[RudePeer, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a worker left in a removed container's empty root once failed to connect
    (LookupError: unknown encoding: idna), and its stream never tried again."""
    peer, port = rude_peer
    tune = sender_module.tcp.tune
    failures: list[int] = []

    def fails_twice(sock: object) -> None:
        if len(failures) < 2:
            failures.append(1)
            raise LookupError("unknown encoding: idna")
        tune(sock)

    monkeypatch.setattr(sender_module.tcp, "tune", fails_twice)
    await calls_made(peer, port, 1)
    assert len(failures) == 2
