"""The Wire stream's authenticated preface (dataplane/preface.py): only key holders reach TAPs.

The preface is tested on socket pairs; the workers with real TAPs in network
namespaces, as in test_dataplane_wire.py: a stock grpcio client on a worker's
port, or a whole worker holding another key, gets no frame onto a pod's
interface, while the same client does without keys (the control that shows
the test can fail). Rotating the key file keeps the streams that run, and new
streams use the new key.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dataplane_helpers import (
    NODE,
    Pod,
    close_pods,
    connect,
    make_node,
    make_pod,
    netns_prefix,
    packet_socket,
    ping,
    wait_until,
    workers,
)

from meshwire.dataplane import preface
from meshwire.dataplane.messages import AddWire

KEY_A = secrets.token_bytes(32)
KEY_B = secrets.token_bytes(32)


def key_file(path: Path, *keys: bytes) -> str:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(key.hex() + "\n" for key in keys))
    os.replace(tmp, path)
    return str(path)


async def run_preface(
    sender_keys: preface.Keyring, receiver_keys: preface.Keyring
) -> tuple[str | BaseException, str | BaseException]:
    """Both sides of the preface on a socket pair: the peer each side learnt, or its
    exception."""
    sent, received = await run_sessions(sender_keys, receiver_keys)
    return (
        sent.peer if isinstance(sent, preface.Session) else sent,
        received.peer if isinstance(received, preface.Session) else received,
    )


async def run_sessions(
    sender_keys: preface.Keyring, receiver_keys: preface.Keyring, encrypt: bool = True
) -> tuple[preface.Session | BaseException, preface.Session | BaseException]:
    """Both sides of the preface on a socket pair: each side's session or exception."""
    left, right = socket.socketpair()

    async def receive() -> preface.Session:
        try:
            return await preface.as_receiver(right, receiver_keys, "node-b")
        except preface.PrefaceError:
            right.close()  # as the worker does with a connection it refuses
            raise

    with left, right:
        left.setblocking(False)
        right.setblocking(False)
        sent, received = await asyncio.gather(
            preface.as_sender(left, sender_keys, "node-a", encrypt),
            receive(),
            return_exceptions=True,
        )
    return sent, received


# -- the preface -------------------------------------------------------------------


async def test_both_ends_with_the_key_learn_each_others_node_name(tmp_path: Path) -> None:
    keys = preface.Keyring(key_file(tmp_path / "wire.key", KEY_A))
    assert await run_preface(keys, keys) == ("node-b", "node-a")


@pytest.mark.parametrize("encrypt", [True, False], ids=["encrypt", "integrity"])
async def test_both_ends_agree_the_record_keys_and_the_senders_mode(
    tmp_path: Path, encrypt: bool
) -> None:
    keys = preface.Keyring(key_file(tmp_path / "wire.key", KEY_A))
    sent, received = await run_sessions(keys, keys, encrypt)
    assert isinstance(sent, preface.Session) and isinstance(received, preface.Session)
    assert (sent.key, sent.transcript) == (received.key, received.transcript)
    assert sent.encrypt is received.encrypt is encrypt
    again, _ = await run_sessions(keys, keys, encrypt)
    assert isinstance(again, preface.Session)
    assert again.transcript != sent.transcript  # fresh nonces: fresh record keys


async def test_a_sender_with_another_key_is_refused_and_told_so(tmp_path: Path) -> None:
    sender = preface.Keyring(key_file(tmp_path / "a.key", KEY_B))
    receiver = preface.Keyring(key_file(tmp_path / "b.key", KEY_A))
    sent, received = await run_preface(sender, receiver)
    assert isinstance(received, preface.PrefaceError)
    assert "does not hold" in str(received)
    assert isinstance(sent, preface.PrefaceError)


async def test_a_wrong_mac_with_the_right_key_id_is_refused(tmp_path: Path) -> None:
    """A sender that knows the key id (not the key) and answers with a made-up MAC."""
    receiver = preface.Keyring(key_file(tmp_path / "wire.key", KEY_A))
    left, right = socket.socketpair()
    with left, right:
        right.setblocking(False)
        serving = asyncio.create_task(preface.as_receiver(right, receiver, "node-b"))
        loop = asyncio.get_running_loop()
        mode = bytes([preface.ENCRYPT])
        hello = preface.MAGIC + preface.key_id(KEY_A) + secrets.token_bytes(32) + mode + b"\x01x"
        await loop.sock_sendall(left, hello)
        await loop.sock_sendall(left, secrets.token_bytes(preface.MAC))
        with pytest.raises(preface.PrefaceError, match="wrong wire key MAC"):
            await serving
        # The receiver never said ACCEPTED: only its hello and MAC came.
        left.setblocking(True)
        left.settimeout(5)
        head = left.recv(4096)
        assert len(head) == len(preface.MAGIC) + 32 + 1 + len(b"node-b") + preface.MAC


async def test_http2_without_the_preface_is_told_apart_from_its_first_bytes(
    tmp_path: Path,
) -> None:
    receiver = preface.Keyring(key_file(tmp_path / "wire.key", KEY_A))
    left, right = socket.socketpair()
    with left, right:
        right.setblocking(False)
        left.sendall(preface.HTTP2_START)
        with pytest.raises(preface.PlainHttp2):
            await preface.as_receiver(right, receiver, "node-b")
        # Only the magic's length was read: nothing past it was taken as a preface.
        assert right.recv(64) == preface.HTTP2_START[len(preface.MAGIC) :]


async def test_a_previous_version_preface_is_refused(tmp_path: Path) -> None:
    receiver = preface.Keyring(key_file(tmp_path / "wire.key", KEY_A))
    left, right = socket.socketpair()
    with left, right:
        right.setblocking(False)
        left.sendall(b"MWWIRE1\0" + preface.key_id(KEY_A) + secrets.token_bytes(32) + b"\x01x")
        with pytest.raises(preface.PrefaceError, match="another version"):
            await preface.as_receiver(right, receiver, "node-b")


async def test_a_stalled_preface_is_given_up_at_the_timeout(tmp_path: Path) -> None:
    receiver = preface.Keyring(key_file(tmp_path / "wire.key", KEY_A))
    left, right = socket.socketpair()
    with left, right:
        right.setblocking(False)
        left.sendall(preface.MAGIC[:3])
        with pytest.raises(TimeoutError):
            await preface.as_receiver(right, receiver, "node-b", within=0.2)


async def test_a_receiver_with_the_new_and_old_keys_accepts_both(tmp_path: Path) -> None:
    old = preface.Keyring(key_file(tmp_path / "old.key", KEY_A))
    new = preface.Keyring(key_file(tmp_path / "new.key", KEY_B))
    both = preface.Keyring(key_file(tmp_path / "both.key", KEY_B, KEY_A))
    assert await run_preface(old, both) == ("node-b", "node-a")
    assert await run_preface(new, both) == ("node-b", "node-a")


async def test_a_changed_key_file_is_read_again_for_the_next_connection(tmp_path: Path) -> None:
    path = tmp_path / "wire.key"
    keys = preface.Keyring(key_file(path, KEY_A))
    other = preface.Keyring(key_file(tmp_path / "b.key", KEY_B))
    assert isinstance((await run_preface(other, keys))[1], preface.PrefaceError)
    key_file(path, KEY_B)
    assert await run_preface(other, keys) == ("node-b", "node-a")


async def test_a_key_file_broken_later_keeps_the_keys_read_before(tmp_path: Path) -> None:
    path = tmp_path / "wire.key"
    keys = preface.Keyring(key_file(path, KEY_A))
    path.write_text("not a key\n")
    assert await run_preface(keys, keys) == ("node-b", "node-a")


def test_a_key_file_without_a_usable_key_is_an_error_naming_the_file(tmp_path: Path) -> None:
    for text, why in (("", "no key"), ("zz\n", "not a hex key"), ("abcd\n", "16 bytes")):
        path = tmp_path / "wire.key"
        path.write_text(text)
        with pytest.raises(ValueError, match=why) as caught:
            preface.Keyring(str(path))
        assert str(path) in str(caught.value)
    with pytest.raises(ValueError, match="No such file"):
        preface.Keyring(str(tmp_path / "missing.key"))


# -- workers -----------------------------------------------------------------------


@pytest.fixture
def prefix() -> Iterator[str]:
    with netns_prefix() as p:
        yield p


# An LLDP frame (what issue 22's client sent) behind the 10-byte virtio-net header
# the pods' TAPs carry (offloads on).
LLDP_DST = bytes.fromhex("0180c200000e")
ATTACKER = bytes.fromhex("02aa00000001")

# A stock grpcio client: one Batch on Wire/Frames, run inside the nodes' netns.
GRPC_CLIENT = """
import sys, grpc
from meshwire.proto import meshwire_pb2
port, wire_id, frame = int(sys.argv[1]), int(sys.argv[2]), bytes.fromhex(sys.argv[3])
batch = wire_id.to_bytes(4, "big") + len(frame).to_bytes(2, "big") + frame
channel = grpc.insecure_channel(f"127.0.0.1:{port}")
call = channel.stream_unary(
    "/meshwire.v1.Wire/Frames",
    request_serializer=meshwire_pb2.Batch.SerializeToString,
    response_deserializer=meshwire_pb2.FramesSummary.FromString,
)
try:
    call(iter([meshwire_pb2.Batch(frames=batch)] * 3), timeout=10,
         metadata=[("meshwire-namespace", "lab")])
    print("OK")
except grpc.RpcError as exc:
    print(exc.code().name, exc.details())
"""


def lldp(marker: bytes) -> bytes:
    return bytes(10) + LLDP_DST + ATTACKER + b"\x88\xcc" + marker + bytes(46)


def stock_client(pod_node: str, port: int, wire_id: int, frame: bytes) -> str:
    netns = os.path.basename(pod_node)
    args = [str(port), str(wire_id), frame.hex()]
    done = subprocess.run(
        ["ip", "netns", "exec", netns, sys.executable, "-c", GRPC_CLIENT, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout.strip() or done.stderr.strip()


def arrived(sock: socket.socket, marker: bytes, within: float) -> bool:
    """Whether a frame carrying `marker` arrives on the packet socket within `within` s."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            data = sock.recv(65536)
        except TimeoutError:
            return False
        if marker in data:
            return True
    return False


@pytest.mark.root
@pytest.mark.parametrize("keyed", [False, True], ids=["no-keys-control", "keys"])
async def test_a_stock_grpc_client_gets_frames_onto_a_pod_only_without_keys(
    prefix: str, tmp_path: Path, keyed: bool
) -> None:
    config = {"wire_key": key_file(tmp_path / "wire.key", KEY_A)} if keyed else {}
    a = make_pod(prefix, "a", "10.0.0.1/24")
    b = make_pod(prefix, "b", "10.0.0.2/24")
    node = make_node(prefix)
    try:
        async with workers(node, 2, **config) as (node_a, node_b):
            await connect(a, node_a, 1, b, node_b, 2)
            # The wire itself works, keyed or not (its stream opens on the first frame).
            await wait_until(lambda: ping(a, b.address), 30)
            sniffer = packet_socket(b)
            with sniffer:
                marker = secrets.token_bytes(16)
                answer = await asyncio.to_thread(
                    stock_client, node, node_b.data_port, 2, lldp(marker)
                )
                got = await asyncio.to_thread(arrived, sniffer, marker, 3.0 if keyed else 30.0)
            if not keyed:
                assert (answer, got) == ("OK", True)
                return
            # Closed before any HTTP/2 answer: the client sees the connection fail.
            assert answer.startswith("UNAVAILABLE")
            assert not got
            await wait_until(lambda: refused(node_b) >= 1, within=30)
            assert ping(a, b.address)  # and the refusal touched no wire
    finally:
        close_pods(a, b)


def refused(handle: object) -> int:
    report = getattr(handle, "streams", None)
    return report.refused if report is not None else 0


@pytest.mark.root
async def test_a_worker_holding_another_key_gets_no_frame_onto_a_pod(
    prefix: str, tmp_path: Path
) -> None:
    """An intruder running a whole meshwire worker, with a wire key of its own."""
    good = key_file(tmp_path / "wire.key", KEY_A)
    bad = key_file(tmp_path / "other.key", KEY_B)
    b = make_pod(prefix, "b", "10.0.0.2/24")
    x = make_pod(prefix, "x", "10.0.0.9/24")
    node = make_node(prefix)
    try:
        async with (
            workers(node, 1, wire_key=good) as (node_b,),
            workers(node, 1, wire_key=bad) as (intruder,),
        ):
            await node_b.add_wire(AddWire(2, "lab", NODE, 1, 1), b.fd)
            await intruder.add_wire(AddWire(9, "lab", NODE, node_b.data_port, 2), x.fd)
            sniffer = packet_socket(b)
            with sniffer:
                marker = secrets.token_bytes(16)
                await asyncio.to_thread(send_from, x, lldp(marker)[10:], 20)
                assert not await asyncio.to_thread(arrived, sniffer, marker, 3.0)
            await wait_until(lambda: refused(node_b) >= 1, within=30)
            assert node_b.wires.get(2) is None or node_b.wires[2].rx_frames == 0
    finally:
        close_pods(b, x)


def send_from(pod: Pod, frame: bytes, count: int) -> None:
    """`frame` sent `count` times by the pod on its TAP: what the pod's worker reads."""
    with packet_socket(pod) as sock:
        for _ in range(count):
            sock.send(frame)
            time.sleep(0.05)


@pytest.mark.root
async def test_a_rotated_key_keeps_running_streams_and_new_streams_use_it(
    prefix: str, tmp_path: Path
) -> None:
    path = tmp_path / "wire.key"
    key_file(path, KEY_A)
    a = make_pod(prefix, "a", "10.0.0.1/24")
    b = make_pod(prefix, "b", "10.0.0.2/24")
    try:
        async with workers(make_node(prefix), 2, wire_key=str(path)) as (node_a, node_b):
            await connect(a, node_a, 1, b, node_b, 2)
            await wait_until(lambda: ping(a, b.address), 30)
            # Mid-rotation: the new key first, the old one still accepted.
            key_file(path, KEY_B, KEY_A)
            assert ping(a, b.address)
            # Rotated: only the new key. The streams that run keep going.
            key_file(path, KEY_B)
            assert ping(a, b.address)
            assert refused(node_a) == refused(node_b) == 0
            # New streams (the wire moved away and back) authenticate with the new key.
            await node_a.remove_wire(1)
            await node_b.remove_wire(2)
            await connect(a, node_a, 1, b, node_b, 2)
            await wait_until(lambda: ping(a, b.address), 30)
            assert refused(node_a) == refused(node_b) == 0
    finally:
        close_pods(a, b)
