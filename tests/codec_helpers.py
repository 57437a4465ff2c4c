"""Drives the C codec pieces from tests: the batch reader, the message decoder, delivery.

The C parts are used through `_wirec` directly, as the C sender and receiver
use them; protobuf and the pure-Python codec (dataplane/codec.py) are the
references they are checked against.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from meshwire.dataplane._wirec import ffi, lib
from meshwire.dataplane.wirec import BatchReader, WireTable
from meshwire.proto import meshwire_pb2


def read_batch(table: WireTable, reader: BatchReader) -> tuple[bytes, int, bool]:
    """One mw_batch_read: (packed frames, frame count, drained)."""
    r = reader.handle
    lib.mw_batch_read(table.handle, r)
    return bytes(ffi.buffer(r.buf, r.bytes)), int(r.frames), bool(r.drained)


def grpc_message(packed: bytes) -> bytes:
    """A Batch carrying `packed`, as protobuf serializes it, in gRPC's length-prefixed framing."""
    body = meshwire_pb2.Batch(frames=packed).SerializeToString()
    return grpc_frame(body)


def grpc_frame(body: bytes, compressed: bool = False) -> bytes:
    return bytes([int(compressed)]) + len(body).to_bytes(4, "big") + body


class Decoder:
    """A C Batch decoder whose frames land in `frames`, or are delivered through a table."""

    def __init__(self, table: WireTable | None = None, tag: int = 0) -> None:
        self.frames: list[tuple[int, bytes]] = []
        self.delivered = 0
        self._handle: Any = ffi.gc(lib.mw_batchdec_new(), lib.mw_batchdec_free)
        self._table = table
        self._tag = tag

        def sink(_: Any, wire_id: int, frame: Any, length: int) -> None:
            if self._table is not None:
                self.delivered += lib.mw_table_deliver(
                    self._table.handle, self._tag, wire_id, frame, length
                )
            else:
                self.frames.append((wire_id, bytes(ffi.buffer(frame, length))))

        self._sink = ffi.callback("void(void *, uint32_t, const uint8_t *, size_t)", sink)

    def feed(self, data: bytes) -> None:
        assert lib.mw_batchdec_feed(self._handle, data, len(data), self._sink, ffi.NULL) == 0

    def feed_in(self, data: bytes, sizes: Iterable[int]) -> None:
        """Feeds `data` in chunks of the given sizes (the rest in one last chunk)."""
        at = 0
        for size in sizes:
            self.feed(data[at : at + size])
            at += size
        self.feed(data[at:])

    @property
    def messages(self) -> int:
        return int(lib.mw_batchdec_messages(self._handle))

    @property
    def malformed(self) -> int:
        return int(lib.mw_batchdec_malformed(self._handle))
