"""The gRPC wire end to end: pods in network namespaces, TAPs handed to two workers.

Each test builds its own pods (netns + persistent TAP), a netns whose loopback
stands in for the node underlay, and two workers (one per "node") serving on
it; control's part (opening TAPs, handing fds, naming peers) is played here.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterator

import pytest
from dataplane_helpers import (
    NODE,
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

from meshwire.dataplane.handle import WorkerHandle
from meshwire.dataplane.messages import IMPAIRMENT_FIELDS, AddWire
from meshwire.dataplane.tap import tap_info

pytestmark = pytest.mark.root

SRC = bytes.fromhex("020000000001")
SOL_PACKET = 263
PACKET_AUXDATA = 8
TP_STATUS_VLAN_VALID = 0x10
TP_STATUS_VLAN_TPID_VALID = 0x40
AUXDATA = struct.Struct("=IIIHHHH")


@pytest.fixture
def prefix() -> Iterator[str]:
    with netns_prefix() as value:
        yield value


def frame(dst: str, ethertype_or_len: int, payload: bytes) -> bytes:
    return bytes.fromhex(dst.replace(":", "")) + SRC + struct.pack("!H", ethertype_or_len) + payload


def llc(dsap_ssap_ctrl: bytes, body: bytes) -> tuple[int, bytes]:
    payload = dsap_ssap_ctrl + body
    return len(payload), payload


def control_plane_frames() -> dict[str, bytes]:
    marker = os.urandom(8)
    stp_len, stp = llc(b"\x42\x42\x03", b"\x00\x00\x00\x00" + marker + bytes(27))
    isis_len, isis = llc(b"\xfe\xfe\x03", b"\x83\x1b\x01\x00\x0f\x01\x00\x00" + marker + bytes(30))
    ns_target = bytes.fromhex("fd000000000000000000000000000002")
    icmp6 = b"\x87\x00\x00\x00" + bytes(4) + ns_target + marker
    ipv6 = (
        b"\x60\x00\x00\x00"
        + struct.pack("!HBB", len(icmp6), 58, 255)
        + bytes.fromhex("fe800000000000000000000000000001")
        + bytes.fromhex("ff0200000000000000000001ff000002")
        + icmp6
    )
    return {
        "LLDP": frame("01:80:c2:00:00:0e", 0x88CC, b"\x02\x07\x04" + marker + bytes(40)),
        "LACP": frame("01:80:c2:00:00:02", 0x8809, b"\x01\x01" + marker + bytes(100)),
        "STP BPDU": frame("01:80:c2:00:00:00", stp_len, stp),
        "802.1Q": frame("ff:ff:ff:ff:ff:ff", 0x8100, b"\x00\x64\x08\x00" + marker + bytes(50)),
        "IPv6 ND": frame("33:33:ff:00:00:02", 0x86DD, ipv6),
        "IS-IS": frame("01:80:c2:00:00:14", isis_len, isis),
        "jumbo 9000": frame("02:00:00:00:00:02", 0x88B5, marker + os.urandom(9000 - 8)),
    }


def receive_all(sock: socket.socket, wanted: dict[str, bytes], within: float = 10.0) -> set[str]:
    """Names of the `wanted` frames seen byte-identical on `sock`.

    The kernel strips an 802.1Q tag on receive and reports it aside
    (PACKET_AUXDATA), as tcpdump shows: put it back where it was.
    """
    sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
    seen: set[str] = set()
    sock.settimeout(0.2)
    deadline = time.monotonic() + within
    while seen != set(wanted) and time.monotonic() < deadline:
        try:
            data, ancdata, _, address = sock.recvmsg(65535, 1024)
        except TimeoutError:
            continue
        if address[2] == socket.PACKET_OUTGOING:
            continue
        for level, kind, aux in ancdata:
            if (level, kind) == (SOL_PACKET, PACKET_AUXDATA):
                status, *_, tci, tpid = AUXDATA.unpack_from(aux)
                if status & TP_STATUS_VLAN_VALID:
                    tpid = tpid if status & TP_STATUS_VLAN_TPID_VALID else 0x8100
                    data = data[:12] + struct.pack("!HH", tpid, tci) + data[12:]
        seen |= {name for name, f in wanted.items() if f == data}
    return seen


@pytest.mark.parametrize("offloads", [True, False], ids=["offloads", "plain"])
async def test_pods_on_two_nodes_ping_each_other_over_the_wire(prefix: str, offloads: bool) -> None:
    a = make_pod(prefix, "a", "10.0.0.1/24", offloads=offloads)
    b = make_pod(prefix, "b", "10.0.0.2/24", offloads=offloads)
    try:
        async with workers(make_node(prefix), 2) as (node_a, node_b):
            await connect(a, node_a, 1, b, node_b, 2)
            assert ping(a, b.address)
            assert ping(b, a.address, size=1400)
    finally:
        close_pods(a, b)


@pytest.mark.parametrize("offloads", [True, False], ids=["offloads", "plain"])
async def test_every_ethernet_frame_crosses_unchanged_jumbo_included(
    prefix: str, offloads: bool
) -> None:
    a = make_pod(prefix, "a", "10.0.0.1/24", mtu=9000, offloads=offloads)
    b = make_pod(prefix, "b", "10.0.0.2/24", mtu=9000, offloads=offloads)
    assert tap_info(a.fd) == ("eth1", offloads)
    try:
        async with workers(make_node(prefix), 2) as (node_a, node_b):
            await connect(a, node_a, 1, b, node_b, 2)
            frames = control_plane_frames()
            with packet_socket(a) as sender, packet_socket(b) as receiver:
                for f in frames.values():
                    sender.send(f)
                assert receive_all(receiver, frames) == set(frames)
            assert ping(a, b.address, size=8972)
    finally:
        close_pods(a, b)


async def test_a_full_tap_drops_and_counts_without_stalling_other_wires_on_the_stream(
    prefix: str,
) -> None:
    a = make_pod(prefix, "a", "10.0.0.1/24")
    b = make_pod(prefix, "b", "10.0.0.2/24")
    flooder = make_pod(prefix, "f", "10.0.1.1/24")
    # The far end of the flooded wire: a "TAP" whose queue nobody drains.
    full_tap, undrained = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    full_tap.setblocking(False)
    try:
        async with workers(make_node(prefix), 2) as (node_a, node_b):
            await connect(a, node_a, 1, b, node_b, 2)
            await node_a.add_wire(AddWire(3, "lab", NODE, node_b.data_port, 4), flooder.fd)
            await node_b.add_wire(AddWire(4, "lab", NODE, node_a.data_port, 3), full_tap.fileno())
            with packet_socket(flooder) as sock:
                for _ in range(3000):
                    sock.send(frame("02:00:00:00:00:09", 0x88B5, bytes(1000)))

            assert ping(a, b.address)

            await wait_until(lambda: 4 in node_b.wires and node_b.wires[4].rx_drops > 0)
            assert node_b.wires[4].rx_frames > 0
            assert stream_refs(node_a) == [2]
    finally:
        close_pods(a, b, flooder)
        full_tap.close()
        undrained.close()


async def test_a_stream_lives_while_wires_use_it_and_closes_with_the_last(prefix: str) -> None:
    pods = [make_pod(prefix, f"p{i}", f"10.0.{i // 2}.{1 + i % 2}/24") for i in range(4)]
    try:
        async with workers(make_node(prefix), 2) as (node_a, node_b):
            await connect(pods[0], node_a, 1, pods[1], node_b, 2)
            await connect(pods[2], node_a, 3, pods[3], node_b, 4)

            await wait_until(lambda: stream_refs(node_a) == [2] and incoming(node_b) == 1)
            await node_a.remove_wire(1)
            await wait_until(lambda: stream_refs(node_a) == [1])
            assert ping(pods[2], pods[3].address)

            await node_a.remove_wire(3)
            await wait_until(lambda: stream_refs(node_a) == [] and incoming(node_b) == 0)
            await node_a.remove_wire(3)  # removing what is gone is success
    finally:
        close_pods(*pods)


async def test_a_wire_whose_peer_moves_takes_its_reference_to_the_new_stream(
    prefix: str,
) -> None:
    a = make_pod(prefix, "a", "10.0.0.1/24")
    b = make_pod(prefix, "b", "10.0.0.2/24")
    try:
        async with workers(make_node(prefix), 3) as (node_a, node_b, node_c):
            await connect(a, node_a, 1, b, node_b, 2)
            assert ping(a, b.address)
            await node_b.remove_wire(2)

            await connect(a, node_a, 1, b, node_c, 2)  # pod b now lives on node c

            await wait_until(lambda: stream_ports(node_a) == [node_c.data_port])
            assert ping(a, b.address)
            await wait_until(lambda: incoming(node_b) == 0)
    finally:
        close_pods(a, b)


async def test_a_killed_worker_restarted_and_handed_its_fds_again_resumes_traffic(
    prefix: str,
) -> None:
    a = make_pod(prefix, "a", "10.0.0.1/24")
    b = make_pod(prefix, "b", "10.0.0.2/24")
    node = make_node(prefix)
    try:
        async with workers(node, 2) as (node_a, node_b):
            await connect(a, node_a, 1, b, node_b, 2)
            assert ping(a, b.address)

            node_b.kill()
            await node_b.stop()
            async with workers(node, 1, data_port=node_b.data_port) as (restarted,):
                await restarted.add_wire(AddWire(2, "lab", NODE, node_a.data_port, 1), b.fd)
                await wait_until(lambda: ping(a, b.address, count=1), within=20)
    finally:
        close_pods(a, b)


async def test_a_worker_stopped_by_sigterm_exits_cleanly_and_the_pods_keep_their_taps(
    prefix: str,
) -> None:
    a = make_pod(prefix, "a", "10.0.0.1/24")
    try:
        async with workers(make_node(prefix), 1) as (node_a,):
            await node_a.add_wire(AddWire(1, "lab", NODE, 1, 2), a.fd)
            assert await node_a.stop() == 0
        assert tap_info(a.fd) == ("eth1", True)
    finally:
        close_pods(a)


def stream_refs(handle: WorkerHandle) -> list[int]:
    return [s.refs for s in handle.streams.streams] if handle.streams else [-1]


def stream_ports(handle: WorkerHandle) -> list[int]:
    return [s.peer_port for s in handle.streams.streams] if handle.streams else [-1]


def incoming(handle: WorkerHandle) -> int:
    return handle.streams.incoming if handle.streams else -1


def impairments(**given: float) -> tuple[float, ...]:
    return tuple(given.get(name, 0.0) for name in IMPAIRMENT_FIELDS)


@pytest.mark.parametrize("offloads", [True, False], ids=["offloads", "plain"])
async def test_an_impaired_wire_follows_its_impairments_changed_in_place_and_cleared(
    prefix: str, offloads: bool
) -> None:
    a = make_pod(prefix, "a", "10.0.0.1/24", offloads=offloads)
    b = make_pod(prefix, "b", "10.0.0.2/24", offloads=offloads)
    try:
        async with workers(make_node(prefix), 2) as (node_a, node_b):
            await connect(a, node_a, 1, b, node_b, 2)
            assert ping(a, b.address)

            def set_a(values: tuple[float, ...]) -> AddWire:
                return AddWire(1, "lab", NODE, node_b.data_port, 2, values)

            await node_a.add_wire(set_a(impairments(loss_pct=100)), a.fd)
            assert not ping(a, b.address)
            await wait_until(lambda: node_a.wires[1].impaired_dropped >= 3)
            # In place: the same wire and emulator, every frame now sent twice.
            await node_a.add_wire(set_a(impairments(duplicate_pct=100, delay_ms=1)), a.fd)
            assert ping(a, b.address, size=1400)
            await wait_until(lambda: node_a.wires[1].impaired_duplicated >= 3)
            assert node_a.wires[1].impaired_dropped >= 3
            await node_a.add_wire(set_a(()), a.fd)
            assert ping(a, b.address)
            await wait_until(lambda: node_a.wires[1].impaired_duplicated == 0)
            assert node_b.wires[2].impaired_dropped == 0  # b's end has no impairments
    finally:
        close_pods(a, b)
