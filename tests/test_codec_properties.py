"""Property tests (Hypothesis) of the batch format: the Python codec (dataplane/codec.py)
and the C decoder (cext/batchmsg.c) agree on any frames, any split of the stream, and
any bytes a peer may send.
"""

from __future__ import annotations

from codec_helpers import Decoder, grpc_frame, grpc_message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshwire.dataplane import codec

frames = st.lists(st.tuples(st.integers(0, codec.MAX_WIRE_ID), st.binary(max_size=200)), max_size=8)

# A loaded machine may take its time over an example: no deadline, no slowness check.
PATIENT = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(PATIENT)
@given(frames)
def test_python_unpack_inverts_pack(batch: list[tuple[int, bytes]]) -> None:
    assert codec.unpack(codec.pack(batch)) == batch


@settings(PATIENT)
@given(st.binary(max_size=300))
def test_python_unpack_of_any_bytes_is_frames_that_pack_back_or_malformed(data: bytes) -> None:
    try:
        unpacked = codec.unpack(data)
    except codec.MalformedBatch as exc:
        assert 0 <= exc.offset < len(data)
        return
    assert codec.pack(unpacked) == data


@settings(PATIENT)
@given(st.lists(frames, min_size=1, max_size=4), st.lists(st.integers(0, 64), max_size=10))
def test_the_c_decoder_delivers_what_python_packed_however_the_stream_is_split(
    batches: list[list[tuple[int, bytes]]], sizes: list[int]
) -> None:
    decoder = Decoder()
    decoder.feed_in(b"".join(grpc_message(codec.pack(b)) for b in batches), sizes)
    assert decoder.frames == [frame for batch in batches for frame in batch]


@settings(PATIENT)
@given(st.binary(max_size=300), st.lists(st.integers(0, 64), max_size=10))
def test_the_c_decoder_agrees_with_python_on_any_batch_bytes(data: bytes, sizes: list[int]) -> None:
    """A message's frames up to its first fault are delivered; past it, nothing of it."""
    decoder = Decoder()
    decoder.feed_in(grpc_message(data), sizes)
    try:
        expected = codec.unpack(data)
    except codec.MalformedBatch as exc:
        expected = codec.unpack(data[: exc.offset])
    assert decoder.frames == expected


@settings(PATIENT)
@given(st.binary(max_size=300), st.lists(st.integers(0, 64), max_size=10))
def test_any_message_body_leaves_the_next_message_intact(body: bytes, sizes: list[int]) -> None:
    """gRPC's length prefix bounds a message: whatever its body, the next one decodes."""
    after = [(7, b"the next message")]
    decoder = Decoder()
    decoder.feed_in(grpc_frame(body) + grpc_message(codec.pack(after)), sizes)
    assert decoder.frames[-1:] == after
