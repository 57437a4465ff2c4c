"""The hand-made `Batch` message encoding agrees with protobuf's, both ways."""

from __future__ import annotations

import pytest

from meshwire.dataplane import message
from meshwire.proto import meshwire_pb2

LENGTHS = [1, 2, 127, 128, 255, 16383, 16384, 65535, 65536, 2**21 - 1, 2**21, 1 << 20]


@pytest.mark.parametrize("length", LENGTHS)
def test_a_header_and_its_frames_are_what_protobuf_serializes(length: int) -> None:
    frames = bytes(i % 251 for i in range(length))

    encoded = message.header(length) + frames

    assert encoded == meshwire_pb2.Batch(frames=frames).SerializeToString()
    assert len(message.header(length)) <= message.HEADROOM


@pytest.mark.parametrize("length", LENGTHS)
def test_frames_of_a_protobuf_batch_are_read_without_a_copy(length: int) -> None:
    frames = bytes(i % 253 for i in range(length))
    encoded = meshwire_pb2.Batch(frames=frames).SerializeToString()

    got = message.frames(encoded)

    assert isinstance(got, memoryview) and got.obj is encoded
    assert bytes(got) == frames


def test_a_batch_with_unknown_fields_is_still_read_through_protobuf() -> None:
    encoded = meshwire_pb2.Batch(frames=b"abc").SerializeToString() + b"\x10\x01"  # field 2 = 1

    assert bytes(message.frames(encoded)) == b"abc"


@pytest.mark.parametrize(
    "junk",
    [b"\x0a\x05abc", b"\x0a", b"\x0a\xff\xff\xff\xff\xff\xff\x01", b"\x0b\x01x", b"\xff"],
    ids=["short", "no-length", "long-varint", "wrong-wire-type", "garbage"],
)
def test_bytes_that_are_no_batch_are_refused(junk: bytes) -> None:
    with pytest.raises(message.MalformedMessage, match="not a Batch message"):
        message.frames(junk)


def test_an_empty_batch_has_no_header() -> None:
    with pytest.raises(ValueError, match="never sent"):
        message.header(0)
