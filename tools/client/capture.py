"""`meshwire capture`: a pod interface's frames as pcap, on the node the pod runs on.

An AF_PACKET socket made inside the pod's network namespace and bound to the
interface sees what the interface sends and receives, whatever the link's kind
(veth, vxlan, macvlan, a gRPC wire's TAP): the kernel hands every frame to
packet sockets on its way in and out. The output is classic pcap (LINKTYPE_ETHERNET,
microsecond timestamps), written and flushed frame by frame, so
`meshwire capture ... -w - | wireshark -k -i -` and tcpdump read it live.

`meshwire lab capture POD:INTF` finds the pod's netns in the lab. On a
cluster node, `meshwire capture NS/POD:INTF` asks the node's daemon (its
`/links`, found as `meshwire links` finds it) for the netns of that link end,
so it works for the pods of that node:
`kubectl -n meshwire exec ds/meshwire -- meshwire capture default/r1:eth1 -w - > r1.pcap`.
`--netns PATH INTF` captures any interface of any netns.
"""

from __future__ import annotations

import argparse
import json
import select
import socket
import struct
import sys
import time
import urllib.request
from typing import Any, BinaryIO

from meshwire.base.netns_thread import call_in_netns

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
    p.add_argument(
        "--netns", default="", help="network namespace path; then END is an interface name"
    )
    p.add_argument("--url", help="the daemon's metrics address (default: as `meshwire links`)")
    p.add_argument("--config", help="the daemon's config file, to find metrics.listen")
    p.add_argument("end", metavar="END", help="NS/POD:INTF of a link end on this node, or INTF")
    return p


def end_netns(entries: list[dict[str, Any]], end: str) -> tuple[str, str]:
    """(netns path, interface) of the link end `end` (NS/POD:INTF; POD alone means the
    default namespace) among the daemon's /links entries; raises CaptureError."""
    pod, colon, intf = end.rpartition(":")
    if not colon or not pod or not intf:
        raise CaptureError(f"{end!r}: expected NS/POD:INTF (or --netns PATH INTF)")
    if "/" not in pod:
        pod = f"default/{pod}"
    for entry in entries:
        for side in ("local", "peer"):
            one = entry[side]
            if one["pod"] == pod and one["intf"] == intf and one.get("netns"):
                return str(one["netns"]), intf
    raise CaptureError(f"{pod}:{intf}: no link end of this node's daemon")


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
    # Only this command reads a daemon's config; `meshwire lab` imports the module
    # for its capture options and would pay for the config model at every start.
    from meshwire.control.common.config import ConfigError
    from meshwire.tools.client.links_command import TIMEOUT, daemon_request, daemon_url

    args = parser().parse_args(argv)
    what = "meshwire capture"
    netns, intf = args.netns, args.end
    if not netns:
        try:
            base = args.url or daemon_url(args.config)
            request = daemon_request(base.rstrip("/") + "/links", args.config)
            with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
                entries = json.loads(answer.read())
            netns, intf = end_netns(entries, args.end)
        except (OSError, ValueError, ConfigError, CaptureError) as exc:
            print(f"{what}: {exc}", file=sys.stderr)
            return 1
    return run(netns, intf, args.write, args.count, args.seconds, what)
