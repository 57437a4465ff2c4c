"""`meshwire capture`: pcap of what an interface sends and receives, in any netns."""

from __future__ import annotations

import io
import secrets
import struct
import subprocess
import threading
from collections.abc import Iterator

import pytest
from links_helpers import grpc_row, veth_row

from meshwire.control.daemon.link_report import link_report
from meshwire.control.tables.health import PENDING
from meshwire.tools.client.capture import (
    CaptureError,
    capture,
    end_netns,
    open_capture,
    pcap_header,
)

pytestmark = pytest.mark.root


@pytest.fixture
def veth_in_netns() -> Iterator[tuple[str, str]]:
    """A netns holding a veth pair (a, b), both up; yields (netns path, prefix)."""
    prefix = "mwc" + secrets.token_hex(3)
    name = f"{prefix}ns"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        for cmd in (
            # No IPv6: its router and multicast listener frames would be captured too.
            "sysctl -q -w net.ipv6.conf.all.disable_ipv6=1",
            "sysctl -q -w net.ipv6.conf.default.disable_ipv6=1",
            f"ip link add {prefix}a type veth peer name {prefix}b",
            f"ip link set {prefix}a up",
            f"ip link set {prefix}b up",
        ):
            subprocess.run(["ip", "netns", "exec", name, *cmd.split()], check=True)
        yield f"/run/netns/{name}", prefix
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def test_the_pcap_header_is_classic_ethernet_pcap() -> None:
    magic, major, minor, _, _, snaplen, linktype = struct.unpack("<IHHiIII", pcap_header())
    assert (magic, major, minor, linktype) == (0xA1B2C3D4, 2, 4, 1) and snaplen >= 65535


def test_frames_sent_on_one_end_are_captured_on_the_other(veth_in_netns: tuple[str, str]) -> None:
    netns, prefix = veth_in_netns
    sniffer = open_capture(netns, f"{prefix}b")
    sender = open_capture(netns, f"{prefix}a")
    frames = [bytes.fromhex("ffffffffffff02000000000188b5") + bytes([i]) * 50 for i in range(3)]
    out = io.BytesIO()
    with sniffer, sender:
        done = threading.Thread(target=lambda: capture(sniffer, out, count=3, seconds=30))
        done.start()
        while done.is_alive():
            for frame in frames:
                sender.send(frame)
            done.join(0.1)
    data = out.getvalue()
    offset, seen = 24, []
    while offset < len(data):
        length = struct.unpack("<I", data[offset + 8 : offset + 12])[0]
        seen.append(data[offset + 16 : offset + 16 + length])
        offset += 16 + length
    assert len(seen) == 3 and all(frame in frames for frame in seen)


def test_an_interface_that_is_not_there_is_named(veth_in_netns: tuple[str, str]) -> None:
    netns, _ = veth_in_netns
    with pytest.raises(CaptureError, match="interface 'nope0'"):
        open_capture(netns, "nope0")
    with pytest.raises(CaptureError, match="network namespace /run/netns/absent-mwc: not found"):
        open_capture("/run/netns/absent-mwc", "lo")


def test_a_link_end_is_found_in_the_daemons_links_by_pod_and_interface() -> None:
    veth = veth_row("/run/netns/a", "/run/netns/b", uid=3, a_intf="eth2")
    grpc = grpc_row("/run/netns/c")
    entries = link_report([(veth, PENDING), (grpc, PENDING)])
    assert end_netns(entries, "lab/r1:eth2") == ("/run/netns/a", "eth2")
    assert end_netns(entries, "lab/r2:eth1") == ("/run/netns/b", "eth1")
    assert end_netns(entries, "lab/r1:eth1") == ("/run/netns/c", "eth1")
    with pytest.raises(CaptureError, match="default/r1:eth1: no link end of this node's daemon"):
        end_netns(entries, "r1:eth1")  # a pod without namespace is in `default`
    with pytest.raises(CaptureError, match="no link end"):
        end_netns(entries, "lab/r2:eth9")  # r2's end of the grpc link is on another node
    with pytest.raises(CaptureError, match="expected NS/POD:INTF"):
        end_netns(entries, "eth1")
