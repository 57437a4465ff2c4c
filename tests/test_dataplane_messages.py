"""Control <-> worker messages, fd passing and stream refcounts, without a worker."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from meshwire.dataplane import fdpass, messages
from meshwire.dataplane.counters import Counters
from meshwire.dataplane.streams import StreamKey, Streams


def test_every_message_survives_encode_and_decode() -> None:
    samples: list[messages.Message] = [
        messages.AddWire(7, "lab", "10.1.0.2", 51112, 2**32 - 1),
        messages.AddWire(7, "lab", "10.1.0.2", 51112, 8, (20.0, 2.5, 1.0, 0.0, 0.0, 0.0, 100.0)),
        messages.RemoveWire(7),
        messages.Ready(51113),
        messages.WireAck(7, "wire 7: id must be below 100"),
        messages.StreamReport((messages.StreamState("lab", "fd00::2", 51112, 3, 10**12),), 2, 5, 1),
        messages.WireReport(((7, Counters(1, 2, 3, 4, 5, 2**63)),), last=True),
        messages.WireReport(((7, Counters(*range(1, 13))),), last=True),
    ]
    for message in samples:
        assert messages.decode(messages.encode(message)) == message


@pytest.mark.parametrize(
    ("data", "complaint"),
    [
        (b"\xff", "not JSON"),
        (b"[]", "not a JSON object"),
        (b'{"type":"launch"}', "unknown type 'launch'"),
        (b'{"type":"remove_wire"}', "remove_wire.wire_id: expected int, got None"),
        (b'{"type":"remove_wire","wire_id":true}', "remove_wire.wire_id: expected int"),
        (b'{"type":"ready","data_port":0}', "ready.data_port: 0 outside 1..65535"),
        (
            b'{"type":"add_wire","wire_id":1,"namespace":"a","peer_node":"n",'
            b'"peer_port":1,"peer_wire_id":-1}',
            "add_wire.peer_wire_id: -1 outside",
        ),
        (
            b'{"type":"add_wire","wire_id":1,"namespace":"a","peer_node":"n",'
            b'"peer_port":1,"peer_wire_id":2,"impairments":[20]}',
            "add_wire.impairments: expected .* or 7 non-negative numbers",
        ),
        (
            b'{"type":"add_wire","wire_id":1,"namespace":"a","peer_node":"n",'
            b'"peer_port":1,"peer_wire_id":2,"impairments":[1,1,1,1,1,1,-1]}',
            "add_wire.impairments: expected",
        ),
        (b'{"type":"wire_report","wires":[[1,2]],"last":true}', "wire_report.wires: entry"),
        (b'{"type":"wire_report","wires":[[1,0,0,0,0,0,-1]],"last":true}', "non-negative"),
    ],
)
def test_a_bad_message_is_refused_naming_the_field(data: bytes, complaint: str) -> None:
    with pytest.raises(messages.MessageError, match=complaint.replace("(", r"\(")):
        messages.decode(data)


def test_a_large_wire_report_is_split_into_datagrams_that_fit() -> None:
    wires = [(i, Counters(*[2**63] * 6)) for i in range(1200)]
    reports = messages.wire_reports(wires)
    assert [r.last for r in reports] == [False, False, True]
    assert [w for r in reports for w in r.wires] == wires
    assert all(len(messages.encode(r)) < fdpass.MAX_DATAGRAM for r in reports)
    assert messages.wire_reports([]) == [messages.WireReport((), last=True)]


@pytest.fixture
def channel() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    yield a, b
    a.close()
    b.close()


def test_a_passed_fd_arrives_open_and_not_inheritable(
    channel: tuple[socket.socket, socket.socket],
) -> None:
    control, worker = channel
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    fdpass.send(control, b"hello", [write_end])
    data, fds = fdpass.receive(worker)
    assert data == b"hello"
    assert len(fds) == 1
    assert not os.get_inheritable(fds[0])
    os.write(fds[0], b"x")
    assert os.read(read_end, 1) == b"x"
    for fd in (read_end, write_end, *fds):
        os.close(fd)


def test_a_datagram_with_more_fds_than_expected_is_refused_and_leaks_none(
    channel: tuple[socket.socket, socket.socket],
) -> None:
    control, worker = channel
    pipes = [os.pipe() for _ in range(fdpass.MAX_FDS + 4)]
    fdpass.send(control, b"too many", [w for _, w in pipes])
    open_before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(fdpass.FdPassError, match="fds truncated"):
        fdpass.receive(worker)
    assert len(os.listdir("/proc/self/fd")) == open_before
    for r, w in pipes:
        os.close(r)
        os.close(w)


class FakeStream:
    def __init__(self, key: StreamKey) -> None:
        self.key = key
        self.wires: frozenset[int] = frozenset()

    def set_wires(self, wire_ids: frozenset[int]) -> None:
        self.wires = wire_ids


def test_streams_are_opened_by_the_first_wire_and_handed_back_after_the_last() -> None:
    streams: Streams[FakeStream] = Streams(FakeStream)
    key = StreamKey("lab", "10.1.0.2", 51112)
    assert streams.attach(1, key) is None
    assert streams.attach(2, key) is None
    assert streams.attach(2, key) is None  # again: still one reference
    assert streams.refs() == {key: 2}
    assert streams.detach(1) is None
    emptied = streams.detach(2)
    assert emptied is not None and emptied.key == key
    assert streams.refs() == {}
    assert streams.detach(2) is None


def test_a_wire_whose_peer_moves_leaves_the_old_stream_for_the_new_one() -> None:
    streams: Streams[FakeStream] = Streams(FakeStream)
    old, new = StreamKey("lab", "node1", 51112), StreamKey("lab", "node2", 51112)
    streams.attach(1, old)
    streams.attach(2, old)
    assert streams.attach(1, new) is None
    assert streams.refs() == {old: 1, new: 1}
    emptied = streams.attach(2, new)
    assert emptied is not None and emptied.key == old
    assert streams.refs() == {new: 2}
    assert dict(streams.items())[new].wires == {1, 2}
