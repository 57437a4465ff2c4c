"""The batch codec and the wire table: the C data path agrees with the pure-Python reference.

TAPs are stood in for by nonblocking SOCK_SEQPACKET socket pairs, which keep
message boundaries like a TAP keeps frames, so these tests need no root.
Delivery is driven through the C message decoder, as the receiver drives it.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator

import pytest
from codec_helpers import Decoder, grpc_message, read_batch

from meshwire.dataplane import codec, wirec
from meshwire.dataplane.counters import Counters

NS_TAG = 1


@pytest.fixture
def pairs() -> Iterator[list[tuple[socket.socket, socket.socket]]]:
    """Eight (tap end the codec uses, far end the test uses) pairs."""
    made = [socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET) for _ in range(8)]
    for tap, _ in made:
        tap.setblocking(False)
    yield made
    for a, b in made:
        a.close()
        b.close()


def random_frames(
    rng: random.Random, count: int, ids: list[int], sizes: tuple[int, ...] = (0, 1, 60, 1514, 9018)
) -> list[tuple[int, bytes]]:
    return [(rng.choice(ids), rng.randbytes(rng.choice(sizes))) for _ in range(count)]


def test_python_codec_round_trips_random_batches() -> None:
    rng = random.Random(1)
    for _ in range(200):
        frames = random_frames(rng, rng.randrange(0, 40), [0, 7, 2**32 - 1])
        assert codec.unpack(codec.pack(frames)) == frames


def test_python_codec_refuses_frames_and_ids_that_do_not_fit_the_header() -> None:
    with pytest.raises(ValueError, match="exceeds 65535"):
        codec.pack([(1, bytes(65536))])
    with pytest.raises(ValueError, match="u32"):
        codec.pack([(2**32, b"x")])


def test_c_reader_packs_what_python_packs_headed_by_the_peer_ids(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    rng = random.Random(3)
    table = wirec.WireTable()
    local_ids = [10 + i for i in range(len(pairs))]
    for wire_id, (tap, _) in zip(local_ids, pairs, strict=True):
        table.set(wire_id, tap.fileno(), NS_TAG, peer_id=wire_id + 1000)
    sent: dict[int, list[bytes]] = {wire_id + 1000: [] for wire_id in local_ids}
    for wire_id, frame in random_frames(rng, 60, local_ids):
        if frame:  # a zero-length datagram cannot be told from "nothing"
            pairs[wire_id - 10][1].send(frame)
            sent[wire_id + 1000].append(frame)

    reader = wirec.BatchReader(capacity=1 << 20, max_frames=1000)
    reader.set_wires(local_ids)
    batch, frames, drained = read_batch(table, reader)

    assert drained
    assert frames == sum(len(f) for f in sent.values())
    got: dict[int, list[bytes]] = {peer: [] for peer in sent}
    for peer_id, frame in codec.unpack(batch):
        got[peer_id].append(frame)
    assert got == sent
    assert codec.pack(codec.unpack(batch)) == batch
    assert table.counters(10) == Counters(
        tx_frames=len(sent[1010]), tx_bytes=sum(map(len, sent[1010]))
    )


def test_c_reader_stops_at_max_frames_and_at_a_full_buffer_without_losing_frames(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    table = wirec.WireTable()
    tap, far = pairs[0]
    table.set(1, tap.fileno(), NS_TAG, peer_id=2)
    for i in range(10):
        far.send(bytes([i]) * 100)
    # room for two 100-byte frames and then one read of up to max_frame + 1 bytes
    roomy = wirec.BatchReader(capacity=1 << 16, max_frames=2, max_frame=200)
    tight = wirec.BatchReader(capacity=2 * 106 + 6 + 201, max_frames=8, max_frame=200)
    roomy.set_wires([1])
    tight.set_wires([1])

    received = []
    for reader, most in [(roomy, 2), (tight, 3), (roomy, 2), (tight, 3)]:
        batch, frames, drained = read_batch(table, reader)
        assert frames == most
        assert not drained
        received += codec.unpack(batch)
    assert read_batch(table, tight)[1:] == (0, True)
    assert received == [(2, bytes([i]) * 100) for i in range(10)]


def test_c_reader_drops_and_counts_a_frame_longer_than_max_frame(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    table = wirec.WireTable()
    tap, far = pairs[0]
    table.set(1, tap.fileno(), NS_TAG, peer_id=1)
    far.send(b"x" * 300)
    far.send(b"y" * 50)
    reader = wirec.BatchReader(capacity=4096, max_frames=8, max_frame=200)
    reader.set_wires([1])

    batch, _, _ = read_batch(table, reader)

    assert codec.unpack(batch) == [(1, b"y" * 50)]
    assert table.counters(1) == Counters(tx_frames=1, tx_bytes=50, tx_drops=1)


def deliver(table: wirec.WireTable, tag: int, frames: list[tuple[int, bytes]]) -> int:
    """Decodes one message carrying `frames` and delivers them; returns how many arrived."""
    decoder = Decoder(table, tag)
    decoder.feed(grpc_message(codec.pack(frames)))
    assert decoder.messages == 1
    return decoder.delivered


def test_each_received_frame_is_written_to_its_wire_in_order(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    rng = random.Random(4)
    table = wirec.WireTable()
    ids = [5, 1024, 70000, 2**25 - 1]  # several table pages, the last id allowed
    for wire_id, (tap, _) in zip(ids, pairs, strict=False):
        table.set(wire_id, tap.fileno(), NS_TAG, peer_id=0)
    frames = [(w, f) for w, f in random_frames(rng, 50, ids) if f]

    assert deliver(table, NS_TAG, frames) == len(frames)

    for wire_id, (_, far) in zip(ids, pairs, strict=False):
        expected = [f for w, f in frames if w == wire_id]
        assert [far.recv(65536) for _ in expected] == expected
        assert table.counters(wire_id) == Counters(
            rx_frames=len(expected), rx_bytes=sum(map(len, expected))
        )


def test_a_full_tap_drops_and_counts_while_other_wires_still_get_their_frames(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    table = wirec.WireTable()
    (full_tap, _), (tap, far) = pairs[0], pairs[1]
    table.set(1, full_tap.fileno(), NS_TAG, peer_id=0)
    table.set(2, tap.fileno(), NS_TAG, peer_id=0)
    deliver(table, NS_TAG, [(1, bytes(1500))] * 1000)  # far more than a socket buffer holds

    delivered = deliver(table, NS_TAG, [(1, b"more"), (2, b"hello")])

    assert delivered == 1
    assert far.recv(100) == b"hello"
    full = table.counters(1)
    assert full is not None
    assert full.rx_drops > 0
    assert full.rx_frames + full.rx_drops == 1001


def test_frames_for_unknown_wires_or_another_namespace_are_counted_not_delivered(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    table = wirec.WireTable()
    tap, far = pairs[0]
    table.set(1, tap.fileno(), NS_TAG, peer_id=0)

    delivered = deliver(table, NS_TAG, [(2, b"a"), (2**31, b"b")])
    delivered += deliver(table, NS_TAG + 1, [(1, b"c")])
    delivered += deliver(table, 0, [(1, b"d")])  # a stream whose namespace has no wire here

    assert delivered == 0
    assert table.unknown == 4
    far.setblocking(False)
    with pytest.raises(BlockingIOError):
        far.recv(100)


def test_namespaces_get_lasting_tags_from_one() -> None:
    table = wirec.WireTable()

    tags = [table.tag(ns) for ns in ("default", "lab-2", "default", "", "lab-2")]

    assert tags == [1, 2, 1, 3, 2]


def test_a_cleared_wire_forgets_its_counters_and_a_re_pointed_wire_keeps_them(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    table = wirec.WireTable()
    (tap_a, _), (tap_b, far_b) = pairs[0], pairs[1]
    table.set(1, tap_a.fileno(), NS_TAG, peer_id=0)
    deliver(table, NS_TAG, [(1, b"x")])

    table.set(1, tap_b.fileno(), NS_TAG, peer_id=0)
    deliver(table, NS_TAG, [(1, b"y")])
    assert far_b.recv(10) == b"y"
    assert table.counters(1) == Counters(rx_frames=2, rx_bytes=2)

    assert table.clear(1)
    assert table.counters(1) is None
    assert not table.clear(1)


def test_a_wire_id_beyond_the_table_is_refused_by_name() -> None:
    table = wirec.WireTable(id_limit=100)
    with pytest.raises(wirec.WireTableError, match="wire 100"):
        table.set(100, 0, NS_TAG, peer_id=0)
