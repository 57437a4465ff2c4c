"""The batch format of the gRPC wire, in pure Python: the reference for the C codec.

A batch is `[wire id u32][len u16][frame]...` in network byte order (docs/design.md §5);
the wire id is the receiver's. On the data path C packs (`cext/wirec.c`) and
unpacks (`cext/batchmsg.c`) batches; tests check both agree with this byte for byte.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

HEADER = struct.Struct("!IH")
MAX_FRAME = 0xFFFF
MAX_WIRE_ID = 0xFFFFFFFF


class MalformedBatch(ValueError):
    """A batch whose header at `offset` is truncated or announces bytes past the end."""

    def __init__(self, offset: int, length: int) -> None:
        super().__init__(
            f"malformed batch: truncated frame header or frame at byte {offset} of {length}"
        )
        self.offset = offset


def pack(frames: Iterable[tuple[int, bytes]]) -> bytes:
    """Packs (wire id, frame) pairs; a frame over 65535 bytes or an id over u32 is a ValueError."""
    parts: list[bytes] = []
    for wire_id, frame in frames:
        if not 0 <= wire_id <= MAX_WIRE_ID:
            raise ValueError(f"wire id {wire_id} does not fit the u32 header field")
        if len(frame) > MAX_FRAME:
            raise ValueError(f"frame of {len(frame)} bytes on wire {wire_id} exceeds {MAX_FRAME}")
        parts.append(HEADER.pack(wire_id, len(frame)))
        parts.append(frame)
    return b"".join(parts)


def unpack(batch: bytes) -> list[tuple[int, bytes]]:
    """The (wire id, frame) pairs of a batch; raises MalformedBatch, reading nothing past the end.

    An empty batch has no frames; a zero-length frame is well-formed.
    """
    frames: list[tuple[int, bytes]] = []
    offset = 0
    view = memoryview(batch)
    while offset < len(batch):
        if len(batch) - offset < HEADER.size:
            raise MalformedBatch(offset, len(batch))
        wire_id, length = HEADER.unpack_from(batch, offset)
        start = offset + HEADER.size
        if len(batch) - start < length:
            raise MalformedBatch(offset, len(batch))
        frames.append((wire_id, bytes(view[start : start + length])))
        offset = start + length
    return frames
