"""`meshwire capture`: a pod interface's frames as pcap, on the node the pod runs on.

An AF_PACKET socket made inside the pod's network namespace and bound to the
interface sees what the interface sends and receives, whatever the link's kind
(veth, vxlan, macvlan, a gRPC wire's TAP): the kernel hands every frame to
packet sockets on its way in and out. The output is classic pcap (LINKTYPE_ETHERNET,
microsecond timestamps), written and flushed frame by frame, so
`meshwire capture ... -w - | wireshark -k -i -` and tcpdump read it live.

`meshwire lab capture POD:INTF` finds the pod's netns in the lab; on a cluster
the daemon's image has the CLI: `kubectl exec` into the node's daemon and run
`meshwire capture --netns /proc/<pid>/ns/net INTF` (or the CNI_NETNS path).
"""

from __future__ import annotations

import argparse
import select
import socket
import struct
import sys
import time
from typing import BinaryIO

from meshwire.dataplane.netns_thread import call_in_netns

ETH_P_ALL = 0x0003
PCAP_MAGIC = 0xA1B2C3D4
LINKTYPE_ETHERNET = 1
SNAPLEN = 262144


class CaptureError(RuntimeError):
    """The interface or namespace cannot be captured on; the message says which."""


def pcap_header() -> bytes:
    return struct.pack("<IHHiIII", PCAP_MAGIC, 2, 4, 0, 0, SNAPLEN, LINKTYPE_ETHERNET)


def pcap_record(frame: bytes, when: float, length: int | None = None) -> bytes:
    seconds = int(when)
    micros = int((when - seconds) * 1_000_000)
    return struct.pack("<IIII", seconds, micros, len(frame), length or len(frame)) + frame


def open_capture(netns: str, intf: str) -> socket.socket:
    """A packet socket bound to `intf` inside `netns` (a path; "" for the caller's own)."""

    def make() -> socket.socket:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        try:
            sock.bind((intf, ETH_P_ALL))
        except OSError as exc:
            sock.close()
            raise CaptureError(f"interface {intf!r}: {exc.strerror or exc}") from None
        return sock

    try:
        return call_in_netns(netns, make) if netns else make()
    except FileNotFoundError:
        raise CaptureError(f"network namespace {netns}: not found") from None


def capture(
    sock: socket.socket,
    out: BinaryIO,
    count: int = 0,
    seconds: float = 0.0,
) -> int:
    """Writes pcap of the frames `sock` sees until `count` frames (0: no limit) or
    `seconds` (0: no limit) pass; returns the frames written. Closing the reader
    (a broken pipe) ends it quietly."""
    deadline = time.monotonic() + seconds if seconds > 0 else None
    written = 0
    out.write(pcap_header())
    out.flush()
    while not count or written < count:
        wait = None if deadline is None else deadline - time.monotonic()
        if wait is not None and wait <= 0:
            break
        readable, _, _ = select.select([sock], [], [], wait)
        if not readable:
            continue
        frame = sock.recv(SNAPLEN)
        out.write(pcap_record(frame, time.time()))
        out.flush()
        written += 1
    return written


def parser(prog: str = "meshwire capture") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="capture an interface's frames as pcap")
    add_options(p)
    p.add_argument("--netns", default="", help="network namespace path (default: this one's)")
    p.add_argument("intf", help="interface name")
    return p


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-w", dest="write", default="-", help="pcap file, or - for stdout (default)")
    p.add_argument("-c", dest="count", type=int, default=0, help="stop after N frames")
    p.add_argument("--seconds", type=float, default=0.0, help="stop after S seconds")


def run(netns: str, intf: str, write: str, count: int, seconds: float, what: str) -> int:
    """Captures and reports to stderr (stdout may be the pcap); returns an exit status."""
    try:
        sock = open_capture(netns, intf)
    except CaptureError as exc:
        print(f"{what}: {exc}", file=sys.stderr)
        return 1
    with sock:
        try:
            if write == "-":
                written = capture(sock, sys.stdout.buffer, count, seconds)
            else:
                with open(write, "wb") as out:
                    written = capture(sock, out, count, seconds)
        except BrokenPipeError:
            return 0
        except KeyboardInterrupt:
            return 0
    print(f"{what}: {written} frames captured", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    return run(args.netns, args.intf, args.write, args.count, args.seconds, "meshwire capture")
