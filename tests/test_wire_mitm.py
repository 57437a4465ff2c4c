"""A man in the middle between two nodes' workers (docs/design.md §10): after the preface,
an attacker on the path can neither inject, alter nor replay a frame.

Two workers in a netns standing in for the underlay, pod a's wire dialling node b
through a relay process (mitm_relay.py) that passes the preface intact and then
attacks the stream once: it flips a byte of a record, replays a record, or slips in a
record of its own carrying a frame for pod b. Pod a keeps sending numbered frames.
No injected frame and no altered frame reaches pod b's interface, node b counts the
refusal, and the stream comes back by itself (a new preface, through the same relay,
which attacks only once). The control: the same injection into a wire without keys
puts its frame onto pod b, so the test can fail.
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

import mitm_relay
import pytest
from dataplane_helpers import (
    NODE,
    Pod,
    close_pods,
    make_node,
    make_pod,
    netns_prefix,
    packet_socket,
    ping,
    wait_until,
    workers,
)

from meshwire.dataplane import preface
from meshwire.dataplane.handle import WorkerHandle
from meshwire.dataplane.messages import AddWire
from meshwire.dataplane.worker import WorkerConfig

RELAY = str(Path(__file__).with_name("mitm_relay.py"))
# Frames behind the 10-byte virtio-net header the pods' TAPs carry (offloads on), of a
# local experimental ethertype: pod a's numbered frames, and the attacker's.
BROADCAST = b"\xff" * 6
SENDER = bytes.fromhex("02aa000000a1")
ATTACKER = bytes.fromhex("02aa000000ee")
ETHERTYPE = b"\x88\xb5"


@pytest.fixture
def prefix() -> Iterator[str]:
    with netns_prefix() as p:
        yield p


def numbered(tag: bytes, n: int) -> bytes:
    return BROADCAST + SENDER + ETHERTYPE + tag + n.to_bytes(4, "big") + bytes(40)


def attack_frame(marker: bytes) -> bytes:
    return bytes(10) + BROADCAST + ATTACKER + ETHERTYPE + marker + bytes(40)


class Relay:
    """mitm_relay.py running in the node's netns, stopped by its PID."""

    def __init__(self, node: str, target: int, mode: str, inject: bytes, status: Path) -> None:
        netns = os.path.basename(node)
        args = [sys.executable, RELAY, str(target), mode, inject.hex(), str(status)]
        self.process = subprocess.Popen(
            ["ip", "netns", "exec", netns, *args], stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline())

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def refused(handle: WorkerHandle) -> int:
    report = handle.streams
    return report.refused if report is not None else 0


class Traffic:
    """Pod a sends numbered frames; pod b's sniffer keeps every frame of pod a's and of
    the attacker's that arrives."""

    def __init__(self, a: Pod, b: Pod) -> None:
        self.tag = secrets.token_bytes(8)
        self.sent: set[bytes] = set()
        self.received: list[bytes] = []
        # Bound now, before the wire exists: no frame can pass before the sniffer listens.
        self._out, self._in = packet_socket(a), packet_socket(b)
        self._in.settimeout(0.2)
        self._stop = False

    def run_sender(self) -> None:
        with self._out as sock:
            n = 0
            while not self._stop:
                frame = numbered(self.tag, n)
                self.sent.add(frame)
                sock.send(frame)
                n += 1
                time.sleep(0.01)

    def run_sniffer(self) -> None:
        """Keeps frames until stopped, then until the socket holds no more (a loaded
        machine may leave frames queued that arrived before the stop)."""
        with self._in as sock:
            while True:
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    if self._stop:
                        return
                    continue
                if data[6:12] in (SENDER, ATTACKER):
                    self.received.append(data)

    def stop(self) -> None:
        self._stop = True


async def attacked_wire(
    prefix: str, tmp_path: Path, mode: str, config: dict[str, str]
) -> tuple[Traffic, bytes, int, bool]:
    """Runs the attack `mode` on a wire a -> b through the relay, with pod a sending all
    along; returns the traffic, the injected frame's marker, node b's refusals and
    whether the wire carried a ping again after the attack."""
    a = make_pod(prefix, "a", "10.0.0.1/24")
    b = make_pod(prefix, "b", "10.0.0.2/24")
    node = make_node(prefix)
    status = tmp_path / "attacked"
    marker = secrets.token_bytes(16)
    try:
        async with workers(node, 2, **config) as (node_a, node_b):
            relay = Relay(node, node_b.data_port, mode, attack_frame(marker), status)
            try:
                traffic = Traffic(a, b)
                await node_b.add_wire(AddWire(2, "lab", NODE, node_a.data_port, 1), b.fd)
                await node_a.add_wire(AddWire(1, "lab", NODE, relay.port, 2), a.fd)
                threads = [
                    asyncio.create_task(asyncio.to_thread(traffic.run_sniffer)),
                    asyncio.create_task(asyncio.to_thread(traffic.run_sender)),
                ]
                try:
                    await wait_until(status.exists, within=60)
                    if config:
                        await wait_until(lambda: refused(node_b) >= 1, within=60)
                    # The stream reopens on its own: frames flow again.
                    came_back = await recovered(a, b)
                finally:
                    traffic.stop()
                    await asyncio.gather(*threads)
                return traffic, marker, refused(node_b), came_back
            finally:
                relay.stop()
    finally:
        close_pods(a, b)


async def recovered(a: Pod, b: Pod) -> bool:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if await asyncio.to_thread(ping, a, b.address):
            return True
    return False


def key_config(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "wire.key"
    path.write_text(secrets.token_bytes(32).hex() + "\n")
    return {"wire_key": str(path)}


@pytest.mark.root
@pytest.mark.parametrize("mode", ["inject", "flip", "replay"])
async def test_an_attacker_on_the_path_gets_no_frame_in_and_the_stream_comes_back(
    prefix: str, tmp_path: Path, mode: str
) -> None:
    traffic, marker, refusals, came_back = await attacked_wire(
        prefix, tmp_path, mode, key_config(tmp_path)
    )
    assert not any(marker in frame for frame in traffic.received)
    # Every frame pod b got is one pod a sent, byte for byte, and none came twice.
    delivered = [frame[: len(numbered(traffic.tag, 0))] for frame in traffic.received]
    assert set(delivered) <= traffic.sent
    assert len(delivered) == len(set(delivered))
    assert delivered, "no frame of pod a's reached pod b"
    assert refusals >= 1
    assert came_back


@pytest.mark.root
async def test_without_keys_the_same_injection_reaches_the_pod(prefix: str, tmp_path: Path) -> None:
    traffic, marker, _, _ = await attacked_wire(prefix, tmp_path, "inject-plain", {})
    assert any(marker in frame for frame in traffic.received)


def test_the_relay_counts_the_senders_preface_as_this_worker_sends_it() -> None:
    fixed = len(preface.MAGIC) + preface.KEY_ID + preface.NONCE + 2
    assert (fixed, preface.MAC) == (mitm_relay.HELLO_FIXED, mitm_relay.MAC)


@pytest.mark.root
async def test_a_stream_delivers_only_to_wires_negotiated_with_the_node_it_proved_to_be(
    prefix: str, tmp_path: Path
) -> None:
    """A node holding the key (here at 127.0.0.2) sends for a wire whose far end is
    another node (127.0.0.1): its frames are dropped as unknown, never put on the pod."""
    config = key_config(tmp_path)
    b = make_pod(prefix, "b", "10.0.0.2/24")
    x = make_pod(prefix, "x", "10.0.0.9/24")
    node = make_node(prefix)
    other = await WorkerHandle.start(
        WorkerConfig(netns=node, listen_host="127.0.0.2", report_interval=0.1, **config)
    )
    try:
        async with workers(node, 1, **config) as (node_b,):
            await node_b.add_wire(AddWire(2, "lab", NODE, 1, 1), b.fd)
            await other.add_wire(AddWire(9, "lab", NODE, node_b.data_port, 2), x.fd)
            marker = secrets.token_bytes(16)
            frame = BROADCAST + ATTACKER + ETHERTYPE + marker + bytes(40)
            with packet_socket(b) as sniffer:
                sniffer.settimeout(0.2)
                sender = asyncio.create_task(asyncio.to_thread(send_until, x, frame, node_b))
                try:
                    await wait_until(lambda: unknown(node_b) >= 1, within=60)
                finally:
                    await sender
                assert not any(marker in data for data in drain(sniffer))
            assert refused(node_b) == 0  # it proved its key: dropped for its node, not refused
    finally:
        await other.stop()
        close_pods(b, x)


def unknown(handle: WorkerHandle) -> int:
    report = handle.streams
    return report.unknown if report is not None else 0


def send_until(pod: Pod, frame: bytes, handle: WorkerHandle) -> None:
    """Sends `frame` from the pod every 50 ms until `handle` counts an unknown frame."""
    deadline = time.monotonic() + 60
    with packet_socket(pod) as sock:
        while unknown(handle) < 1 and time.monotonic() < deadline:
            sock.send(frame)
            time.sleep(0.05)


def drain(sock: socket.socket) -> list[bytes]:
    """What the socket holds now, until it stays quiet for its timeout."""
    got = []
    while True:
        try:
            got.append(sock.recv(65536))
        except TimeoutError:
            return got
