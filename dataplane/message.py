"""The `Batch` message of the Wire stream, encoded and decoded by hand: pure, no copies.

`Batch` has one field, `bytes frames = 1` (proto/meshwire.proto). Its protobuf
encoding is the tag byte 0x0A, the length as a varint, then the packed frames.
The sender's reader packs frames into a buffer after `HEADROOM` spare bytes
and writes this header into the end of that room, so the message leaves with
one copy (into the bytes object gRPC sends) instead of protobuf's three; the
receiver hands the C codec a view into the received message. Any other valid
encoding of a `Batch` (a peer built from another protobuf library, unknown
fields) is still read, through protobuf itself.
"""

from __future__ import annotations

from meshwire.proto import meshwire_pb2

# Room for the tag byte and a varint of a length below 2^35.
HEADROOM = 6
TAG = 0x0A  # field 1, wire type 2 (length-delimited)


class MalformedMessage(ValueError):
    """Bytes that are not a protobuf `Batch`."""


def header(length: int) -> bytes:
    """The bytes that precede `length` bytes of packed frames in a `Batch` message."""
    if length == 0:
        raise ValueError("an empty batch is never sent")
    out = bytearray([TAG])
    while True:
        byte = length & 0x7F
        length >>= 7
        if length:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def frames(message: bytes) -> memoryview | bytes:
    """The packed frames of an encoded `Batch`; a view into `message` when it has the
    one-field form `header` makes. Raises MalformedMessage."""
    view = memoryview(message)
    if len(view) > 1 and view[0] == TAG:
        length, shift, i = 0, 0, 1
        while i < len(view) and i < HEADROOM:
            byte = view[i]
            length |= (byte & 0x7F) << shift
            shift += 7
            i += 1
            if not byte & 0x80:
                if i + length == len(view):
                    return view[i:]
                break
    try:
        batch = meshwire_pb2.Batch.FromString(bytes(message))
    except Exception as exc:  # protobuf raises its own DecodeError
        raise MalformedMessage(f"not a Batch message ({len(view)} bytes): {exc}") from None
    packed: bytes = batch.frames
    return packed
