"""Batch messages in gRPC framing (cext/batchmsg.c) agree with protobuf, however they arrive."""

from __future__ import annotations

import random

import pytest
from codec_helpers import Decoder, grpc_frame, grpc_message

from meshwire.dataplane import codec
from meshwire.dataplane._wirec import ffi, lib
from meshwire.proto import meshwire_pb2

LENGTHS = [1, 2, 127, 128, 255, 16383, 16384, 65535, 65536, 2**21 - 1, 2**21, 1 << 20]


def header(frames_len: int) -> bytes:
    out = ffi.new("uint8_t[]", int(lib.MW_BATCHMSG_HEADROOM))
    return bytes(ffi.buffer(out, lib.mw_batchmsg_header(out, frames_len)))


def random_frames(rng: random.Random, most: int = 5) -> list[tuple[int, bytes]]:
    sizes = (0, 1, 60, 1514, 9000, 65535)
    return [(rng.randrange(2**32), rng.randbytes(rng.choice(sizes))) for _ in range(most)]


@pytest.mark.parametrize("length", LENGTHS)
def test_a_message_header_and_its_frames_are_what_protobuf_and_grpc_make(length: int) -> None:
    frames = bytes(i % 251 for i in range(length))

    encoded = header(length) + frames

    assert encoded == grpc_message(frames)
    assert len(header(length)) <= lib.MW_BATCHMSG_HEADROOM


def test_messages_decode_to_their_frames_in_order_however_the_stream_is_cut() -> None:
    rng = random.Random(1)
    for _ in range(300):
        frames: list[tuple[int, bytes]] = []
        stream = b""
        for _ in range(rng.randrange(1, 4)):
            batch = random_frames(rng, rng.randrange(0, 5))
            stream += grpc_message(codec.pack(batch))
            frames += batch
        decoder = Decoder()
        cuts = [rng.choice([1, 2, 5, 9, rng.randrange(1, 70000)]) for _ in range(len(stream) // 3)]

        decoder.feed_in(stream, cuts)

        assert decoder.frames == frames
        assert decoder.malformed == 0


def test_every_single_cut_of_a_small_stream_decodes_alike() -> None:
    frames = [(7, b"lldp"), (8, b""), (2**32 - 1, bytes(range(200)))]
    stream = grpc_message(codec.pack(frames)) + grpc_message(b"") + grpc_message(codec.pack(frames))
    for cut in range(len(stream) + 1):
        decoder = Decoder()

        decoder.feed_in(stream, [cut])

        assert decoder.frames == frames + frames, cut
        assert decoder.messages == 3


def test_an_empty_batch_is_a_message_without_frames() -> None:
    decoder = Decoder()

    decoder.feed(grpc_frame(meshwire_pb2.Batch().SerializeToString()))

    assert (decoder.messages, decoder.frames) == (1, [])


def test_unknown_fields_around_the_frames_are_skipped_as_protobuf_skips_them() -> None:
    packed = codec.pack([(1, b"abc"), (2, b"de")])
    body = (
        b"\x10\x96\x01"  # field 2, varint 150
        + b"\x30" + b"\xff" * 9 + b"\x01"  # field 6, varint -1 as int64: 10 bytes
        + b"\x19" + bytes(8)  # field 3, fixed64
        + meshwire_pb2.Batch(frames=packed).SerializeToString()
        + b"\x22\x03xyz"  # field 4, 3 bytes
        + b"\x2d" + bytes(4)  # field 5, fixed32
    )  # fmt: skip
    assert meshwire_pb2.Batch.FromString(body).frames == packed
    decoder = Decoder()

    decoder.feed_in(grpc_frame(body), [3, 4, 5])

    assert decoder.frames == [(1, b"abc"), (2, b"de")]
    assert (decoder.messages, decoder.malformed) == (1, 0)


FRAME = codec.pack([(9, b"good")])
MALFORMED = {
    "compressed": grpc_frame(meshwire_pb2.Batch(frames=FRAME).SerializeToString(), True),
    "frame header cut by the field": grpc_frame(b"\x0a\x03" + FRAME[:3]),
    "frame longer than its field": grpc_frame(b"\x0a\x07" + FRAME[:7]),
    "field longer than the message": grpc_frame(b"\x0a\x20" + FRAME),
    "group wire type": grpc_frame(b"\x0b" + FRAME),
    "field number 0": grpc_frame(b"\x02\x00"),
    "length of 6 bytes": grpc_frame(b"\x0a\xff\xff\xff\xff\xff\x01" + FRAME),
    "varint of 11 bytes": grpc_frame(b"\x10" + b"\xff" * 10 + b"\x01"),
    "varint cut by the message": grpc_frame(b"\x10\xff"),
    "key without a value": grpc_frame(b"\x10"),
}


@pytest.mark.parametrize("bad", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_malformed_message_is_counted_and_skipped_and_the_next_one_decodes(bad: bytes) -> None:
    after = grpc_message(codec.pack([(3, b"after")]))
    decoder = Decoder()

    decoder.feed_in(bad + after, [len(bad) - 1, 1])

    assert decoder.malformed == 1
    assert decoder.frames[-1:] == [(3, b"after")]
    assert decoder.messages == 1


def test_frames_before_the_fault_in_a_malformed_message_are_delivered() -> None:
    packed = codec.pack([(1, b"first"), (1, b"second")])
    bad = grpc_frame(b"\x0a" + bytes([len(packed) - 1]) + packed[:-1])  # cuts `second` short

    decoder = Decoder()
    decoder.feed(bad)

    assert decoder.frames == [(1, b"first")]
    assert decoder.malformed == 1


def test_garbage_with_a_gRPC_prefix_never_desynchronises_the_stream() -> None:
    rng = random.Random(2)
    decoder = Decoder()
    for _ in range(2000):
        decoder.feed(grpc_frame(rng.randbytes(rng.randrange(0, 40))))
    good = [(5, b"survivor")]

    decoder.feed(grpc_message(codec.pack(good)))

    assert decoder.frames[-1:] == good
    assert decoder.messages + decoder.malformed == 2001
