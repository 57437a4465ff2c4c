"""How soon a pod end loses carrier when its far pod goes, and gets it back, same run.

    .venv/bin/python bench/carrier_bench.py [--repeat 5] [--transport vxlan grpc] [--json FILE]

A real `meshwire lab` on two simulated nodes: r1 and r2 on node1 (a same-node
link, uid 1), r3 on node2 (a cross-node link, uid 2, over `--transport`). For
each far pod (r2, then r3), `--repeat` times, `meshwire lab restart-pod FAR
--wait 0` does what a runtime does when a pod restarts: CNI DEL, a new netns,
CNI ADD. Two netlink listeners time it from the kernel's own events:

  - gone: the far pod's interface is deleted (RTM_DELLINK in its old netns),
    which is the moment the far end stops existing;
  - no carrier: r1's end of that link loses LOWER_UP (RTM_NEWLINK in r1's netns);
  - back: r1's end has LOWER_UP again (the far pod's new interface is up).

Printed per link: the medians and maxima of gone -> no carrier and of gone ->
back. r1's interface must keep its ifindex throughout; the bench fails if not.

The kernel's floor, in the same run: a veth pair between two namespaces of the
bench's own (a deleted far end would take the near one with it), whose far end
is set admin-down by a netlink call of the bench: the time from that call to
the near end's NO-CARRIER event.

Compare (issue 38): clabernetes' wire shows a far-end pull in about 2.4 ms, and
a crashed pod's peers lose carrier in about 6.3 s.

Everything is named `mwcb<hex>-*` (the lab `cb<hex>`, the floor's namespaces)
and removed at the end, even on failure.
"""

from __future__ import annotations

import argparse
import json
import secrets
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from meshwire.control.links.netns import netlink, open_netns, socket_in
from meshwire.tools.lab.lab_names import netns_path
from meshwire.tools.lab.state import LabDir

NETNS_DIR = "/var/run/netns"
RTMGRP_LINK = 1
RTM_NEWLINK, RTM_DELLINK = 16, 17
IFF_LOWER_UP = 0x10000
NLMSG_HEADER = struct.Struct("=IHHII")
IFINFO = struct.Struct("=BxHiII")
WAIT = 60.0
# The kernel reports a carrier change at once only when its link watcher has run no
# event in the last second (net/core/link_watch.c); later ones wait for that second.
# Each measurement starts after this long a quiet, so every one is timed alike.
LINKWATCH_QUIET = 1.2

LAB = """\
apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata: {name: r1}
spec:
  links:
  - {uid: 1, peer_pod: r2, local_intf: eth1, peer_intf: eth1,
     local_ip: 10.0.1.1/24, peer_ip: 10.0.1.2/24}
  - {uid: 2, peer_pod: r3, local_intf: eth2, peer_intf: eth1,
     local_ip: 10.0.2.1/24, peer_ip: 10.0.2.3/24}
---
apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata: {name: r2}
spec:
  links:
  - {uid: 1, peer_pod: r1, local_intf: eth1, peer_intf: eth1,
     local_ip: 10.0.1.2/24, peer_ip: 10.0.1.1/24}
---
apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata: {name: r3}
spec:
  links:
  - {uid: 2, peer_pod: r1, local_intf: eth1, peer_intf: eth2,
     local_ip: 10.0.2.3/24, peer_ip: 10.0.2.1/24}
"""
PLACEMENT = "r1: node1\nr2: node1\nr3: node2\n"
# far pod -> (r1's interface to it, the far pod's interface)
FAR = {"r2": ("eth1", "eth1"), "r3": ("eth2", "eth1")}


@dataclass
class Events:
    """Link events of one netns, as (monotonic time, type, ifindex, flags), as they come."""

    netns: str
    seen: list[tuple[float, int, int, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def first(self, after: float, **want: int) -> float | None:
        """The time of the first event after `after` with the given type/index/flag bits."""
        with self.lock:
            for at, kind, index, flags in self.seen:
                if at < after:
                    continue
                if "kind" in want and kind != want["kind"]:
                    continue
                if "index" in want and index != want["index"]:
                    continue
                if "lower_up" in want and bool(flags & IFF_LOWER_UP) != bool(want["lower_up"]):
                    continue
                return at
        return None


def listen(events: Events, ready: threading.Event) -> None:
    """Record every RTM_NEWLINK/RTM_DELLINK of `events.netns` until `events.stop`."""
    with open_netns(events.netns) as ns:
        sock = socket_in(ns, socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    with sock:
        sock.bind((0, RTMGRP_LINK))
        sock.settimeout(0.1)
        ready.set()
        while not events.stop.is_set():
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            at = time.monotonic()
            offset = 0
            while offset + NLMSG_HEADER.size <= len(data):
                length, kind, _, _, _ = NLMSG_HEADER.unpack_from(data, offset)
                if length < NLMSG_HEADER.size:
                    break
                if kind in (RTM_NEWLINK, RTM_DELLINK):
                    _, _, index, flags, _ = IFINFO.unpack_from(data, offset + NLMSG_HEADER.size)
                    with events.lock:
                        events.seen.append((at, kind, index, flags))
                offset += (length + 3) & ~3


class Listener:
    def __init__(self, netns: str) -> None:
        self.events = Events(netns)
        ready = threading.Event()
        self._thread = threading.Thread(target=listen, args=(self.events, ready), daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError(f"no netlink listener in {netns}")

    def close(self) -> None:
        self.events.stop.set()
        self._thread.join(5)


def ifindex(netns: str, intf: str) -> int:
    name = netns.rsplit("/", 1)[-1]
    out = subprocess.run(
        ["ip", "-n", name, "-j", "link", "show", intf], capture_output=True, text=True, check=True
    ).stdout
    return int(json.loads(out)[0]["ifindex"])


def wait_for(what: str, probe: Callable[[], float | None]) -> float:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        time.sleep(0.005)
    raise RuntimeError(f"timed out after {WAIT:.0f} s waiting for {what}")


def meshwire(*args: str) -> str:
    argv = [sys.executable, "-m", "meshwire.tools.cli", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:2])}: exit {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def pod_netns(lab: str, pod: str) -> str:
    """The path of `pod`'s netns now, from the lab's state."""
    return netns_path(LabDir.locate(lab, None).load().pod(pod).netns)


def first_of(*times: float | None) -> float | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


def one_restart(lab: str, far: str) -> tuple[float, float]:
    """(far end stopped -> near NO-CARRIER, near NO-CARRIER -> carrier again) in ms, for
    one restart of `far`; the first is negative when the near end lost carrier first."""
    near_intf, far_intf = FAR[far]
    r1 = pod_netns(lab, "r1")
    far_ns = pod_netns(lab, far)
    near_index, far_index = ifindex(r1, near_intf), ifindex(far_ns, far_intf)
    near, gone = Listener(r1), Listener(far_ns)
    try:
        start = time.monotonic()
        meshwire("lab", "restart-pod", far, "--name", lab, "--wait", "0")
        # The far end stops: its old interface loses carrier or is deleted, whichever
        # the kernel reports first.
        stopped = wait_for(
            f"{far}:{far_intf} stopped",
            lambda: first_of(
                gone.events.first(start, kind=RTM_DELLINK, index=far_index),
                gone.events.first(start, kind=RTM_NEWLINK, index=far_index, lower_up=0),
            ),
        )
        lost = wait_for(
            f"r1:{near_intf} without carrier",
            lambda: near.events.first(start, kind=RTM_NEWLINK, index=near_index, lower_up=0),
        )
        back = wait_for(
            f"r1:{near_intf} with carrier again",
            lambda: near.events.first(lost, kind=RTM_NEWLINK, index=near_index, lower_up=1),
        )
    finally:
        near.close()
        gone.close()
    if ifindex(r1, near_intf) != near_index:
        raise RuntimeError(f"r1:{near_intf} was replaced (its ifindex changed)")
    return ((lost - stopped) * 1000, (back - lost) * 1000)


def floor(prefix: str, repeat: int) -> list[float]:
    """ms from a far veth end's admin-down request to the near end's NO-CARRIER event."""
    a, b = f"{prefix}-fa", f"{prefix}-fb"
    out: list[float] = []
    try:
        for name in (a, b):
            subprocess.run(["ip", "netns", "add", name], check=True)
        subprocess.run(
            # Different ifindexes at the two ends, as meshwire's pod ends and node sides
            # have: the kernel reports a veth's carrier change at once only when its
            # peer's ifindex differs from its own (linkwatch_urgent_event).
            ["ip", "-n", a, "link", "add", "eth1", "index", "10", "type", "veth",
             "peer", "eth1", "index", "20", "netns", b],
            check=True,
        )  # fmt: skip
        for name in (a, b):
            subprocess.run(["ip", "-n", name, "link", "set", "eth1", "up"], check=True)
        index = ifindex(f"{NETNS_DIR}/{a}", "eth1")
        for _ in range(repeat):
            time.sleep(LINKWATCH_QUIET)
            out.append(floor_once(f"{NETNS_DIR}/{a}", f"{NETNS_DIR}/{b}", index))
            subprocess.run(["ip", "-n", b, "link", "set", "eth1", "up"], check=True)
    finally:
        for name in (a, b):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return out


def floor_once(near_ns: str, far_ns: str, index: int) -> float:
    """ms from the far end's admin-down request (a netlink call of this process, on a
    connection opened beforehand) to the near end's NO-CARRIER event."""
    near = Listener(near_ns)
    try:
        with open_netns(far_ns) as ns, netlink(ns) as far:
            far_index = far.ipr.link_lookup(ifname="eth1")[0]
            start = time.monotonic()
            far.ipr.link("set", index=far_index, state="down")
        lost = wait_for(
            "the floor's NO-CARRIER",
            lambda: near.events.first(start, kind=RTM_NEWLINK, index=index, lower_up=0),
        )
    finally:
        near.close()
    return (lost - start) * 1000


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(values), 2),
        "min_ms": round(min(values), 2),
        "max_ms": round(max(values), 2),
    }


def run_transport(transport: str, repeat: int, work: Path) -> dict[str, object]:
    lab = "cb" + secrets.token_hex(2)
    lab_file, placement, config = work / "lab.yml", work / "placement.yaml", work / "config.yaml"
    lab_file.write_text(LAB)
    placement.write_text(PLACEMENT)
    config.write_text(f"inter_node_link_type: {transport}\n")
    results: dict[str, object] = {}
    meshwire(
        "lab", "up", str(lab_file), "--name", lab, "--nodes", "2",
        "--placement", str(placement), "--config", str(config),
    )  # fmt: skip
    try:
        for far, kind in (("r2", "same node (veth)"), ("r3", f"across nodes ({transport})")):
            lost, back = [], []
            for _ in range(repeat):
                meshwire("lab", "check", "--name", lab)
                time.sleep(LINKWATCH_QUIET)
                a, b = one_restart(lab, far)
                lost.append(a)
                back.append(b)
            results[kind] = {
                "far_stopped_to_near_no_carrier": summary(lost),
                "near_without_carrier": summary(back),
            }
    finally:
        subprocess.run(
            [sys.executable, "-m", "meshwire.tools.cli", "lab", "down", "--name", lab],
            capture_output=True,
        )
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="restarts per far pod")
    parser.add_argument("--transport", nargs="+", default=["vxlan", "grpc"])
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args()
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="mwcb") as tmp:
        for transport in args.transport:
            results[transport] = run_transport(transport, args.repeat, Path(tmp))
    results["kernel floor: far veth end set down"] = summary(
        floor("mwcb" + secrets.token_hex(2), args.repeat)
    )
    for name, value in results.items():
        print(f"{name}: {json.dumps(value)}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
