"""TCP throughput of stitched pod ends against the kernel's direct links, same run.

    .venv/bin/python bench/podif_bench.py [--seconds 5] [--repeat 3] [--json FILE]

Every pod end meshwire makes is a veth whose peer is in the node's netns; a
same-node link is the two node sides stitched together with tc (clsact, u32
match-all, mirred redirect: control/links/tc.py), a cross-node vxlan link the
node side stitched to a vxlan device of the node. This measures what the stitch
costs against the kernel's floor, on the same machine in the same run:

  (a) veth direct:    pod a -- veth -- pod b;
  (b) veth stitched:  pod a -- veth -- [node: stitch] -- veth -- pod b, built by
      meshwire's own veth driver (`LinkKind.VETH` row) in a node netns of the
      bench's own;
  (c) vxlan direct:   pod a's own vxlan device -- underlay -- pod b's, each made
      in its node's netns and moved into the pod (the vxlan's socket stays in
      the node), as links were before pod ends were all veths;
  (d) vxlan stitched: pod a -- veth -- [node a: stitch -- vxlan] -- underlay --
      [node b: vxlan -- stitch] -- veth -- pod b, built by meshwire's own vxlan
      driver (`LinkKind.VXLAN` rows), one per node.

The two simulated nodes are netns joined by a veth underlay of the lab's MTU
(9,216); the pods' MTU is the config's default. Each is iperf3 TCP (one stream,
`--seconds` long) from a to b, then 64-byte frames from a to b as fast as a's
eth1 takes them (wire_bench's generator, to a MAC no pod has: b's eth1 counts
each and drops it), the rate b received; the figures are medians of `--repeat`
runs, taking (a) to (d) in turn so load on the machine falls on all alike.
Printed: each throughput and frame rate, and stitched/direct for veth and for
vxlan. Namespaces are named
`mwpb<hex>-*` and removed at the end, even on failure."""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from wire_bench import SINK_MAC, compile_framegen

from meshwire.control.common.config import Config
from meshwire.control.links.driver import Drivers, kernel_drivers
from meshwire.control.tables.links import End, LinkKind, LinkRow
from meshwire.tools.lab.nodes import UNDERLAY_MTU

NETNS_DIR = "/var/run/netns"
MTU = Config().mtu
# The two nodes' underlay addresses, and each vxlan pair's VNI.
NODE_IPS = ("192.0.2.1", "192.0.2.2")
DIRECT_VNI, STITCHED_VNI = 7, 8
VXLAN_PORT = 4789


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def make_netns(name: str) -> str:
    ip("netns", "add", name)
    ip("-n", name, "link", "set", "lo", "up")
    return f"{NETNS_DIR}/{name}"


def direct(prefix: str) -> tuple[str, str]:
    a, b = make_netns(f"{prefix}-da"), make_netns(f"{prefix}-db")
    ip(
        "-n",
        f"{prefix}-da",
        "link",
        "add",
        "eth1",
        "type",
        "veth",
        "peer",
        "eth1",
        "netns",
        f"{prefix}-db",
    )
    for name, address in ((f"{prefix}-da", "10.9.0.1/30"), (f"{prefix}-db", "10.9.0.2/30")):
        ip("-n", name, "addr", "add", address, "dev", "eth1")
        ip("-n", name, "link", "set", "eth1", "up")
    return a, b


def stitched(prefix: str) -> tuple[str, str]:
    node = make_netns(f"{prefix}-node")
    a, b = make_netns(f"{prefix}-sa"), make_netns(f"{prefix}-sb")
    row = LinkRow(
        namespace="bench",
        uid=1,
        kind=LinkKind.VETH,
        local=End(pod="a", netns=a, intf="eth1", ip="10.9.0.1/30"),
        peer=End(pod="b", netns=b, intf="eth1", ip="10.9.0.2/30"),
        mtu=MTU,
    )
    Drivers(kernel_drivers(host_netns=node)).update(row)
    return a, b


def nodes(prefix: str) -> tuple[str, str]:
    """Two node netns joined by a veth underlay: NODE_IPS, UNDERLAY_MTU."""
    a, b = make_netns(f"{prefix}-na"), make_netns(f"{prefix}-nb")
    ip("-n", f"{prefix}-na", "link", "add", "ul", "mtu", str(UNDERLAY_MTU), "type", "veth",
       "peer", "ul", "mtu", str(UNDERLAY_MTU), "netns", f"{prefix}-nb")  # fmt: skip
    for name, address in zip((f"{prefix}-na", f"{prefix}-nb"), NODE_IPS, strict=True):
        ip("-n", name, "addr", "add", f"{address}/30", "dev", "ul")
        ip("-n", name, "link", "set", "ul", "up")
    return a, b


def vxlan_direct(prefix: str) -> tuple[str, str]:
    pods = make_netns(f"{prefix}-xa"), make_netns(f"{prefix}-xb")
    for side, (node, remote, address) in enumerate(
        ((f"{prefix}-na", NODE_IPS[1], "10.9.0.1/30"), (f"{prefix}-nb", NODE_IPS[0], "10.9.0.2/30"))
    ):
        pod = pods[side].rsplit("/", 1)[1]
        ip("-n", node, "link", "add", "eth1", "mtu", str(MTU), "type", "vxlan",
           "id", str(DIRECT_VNI), "remote", remote, "dstport", str(VXLAN_PORT))  # fmt: skip
        ip("-n", node, "link", "set", "eth1", "netns", pod)
        ip("-n", pod, "addr", "add", address, "dev", "eth1")
        ip("-n", pod, "link", "set", "eth1", "up")
    return pods


def vxlan_stitched(prefix: str, node_a: str, node_b: str) -> tuple[str, str]:
    a, b = make_netns(f"{prefix}-va"), make_netns(f"{prefix}-vb")
    ends = (
        End(pod="a", netns=a, intf="eth1", ip="10.9.0.1/30"),
        End(pod="b", netns=b, intf="eth1", ip="10.9.0.2/30"),
    )
    for node, (local, peer), peer_ip in (
        (node_a, ends, NODE_IPS[1]),
        (node_b, ends[::-1], NODE_IPS[0]),
    ):
        row = LinkRow(namespace="bench", uid=2, kind=LinkKind.VXLAN, local=local, peer=peer,
                      mtu=MTU, peer_node_ip=peer_ip, vni=STITCHED_VNI)  # fmt: skip
        Drivers(kernel_drivers(host_netns=node, vxlan_port=VXLAN_PORT)).update(row)
    return a, b


def iperf_mbps(a: str, b: str, seconds: float) -> float:
    server = subprocess.Popen(
        ["ip", "netns", "exec", b.rsplit("/", 1)[1], "iperf3", "-s", "-1", "-B", "10.9.0.2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        argv = ["ip", "netns", "exec", a.rsplit("/", 1)[1], "iperf3", "-c", "10.9.0.2", "-J"]
        argv += ["-t", str(seconds)]
        for _ in range(50):  # the server binds in a moment
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            received = json.loads(done.stdout or "{}").get("end", {}).get("sum_received")
            if done.returncode == 0 and received:
                return float(received["bits_per_second"]) / 1e6
            time.sleep(0.1)
        raise RuntimeError(f"iperf3 failed: {done.stdout[-500:]} {done.stderr[-500:]}")
    finally:
        server.kill()
        server.wait()


def eth1(netns: str) -> dict[str, Any]:
    out = subprocess.run(["ip", "-n", netns.rsplit("/", 1)[1], "-j", "-s", "link", "show", "eth1"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    link: dict[str, Any] = json.loads(out)[0]
    return link


def frames_per_s(program: Path, a: str, b: str, seconds: float) -> float:
    """64-byte frames a second that b's eth1 received while a sent as fast as it could."""
    before = eth1(b)["stats64"]["rx"]["packets"]
    argv = ["nsenter", f"--net={a}", str(program), "eth1", SINK_MAC, eth1(a)["address"],
            "10.9.0.1", "10.9.0.2", str(seconds)]  # fmt: skip
    run = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30)
    if run.returncode != 0:
        raise RuntimeError(f"framegen {a}: {run.stderr}")
    sent = float(json.loads(run.stdout)["seconds"])
    return float(eth1(b)["stats64"]["rx"]["packets"] - before) / sent


def arguments(doc: str, seconds: float) -> argparse.ArgumentParser:
    """The options of a bench of pairs: --seconds (a run), --repeat (runs), --json."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=seconds)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    return parser


def remove_namespaces(prefix: str) -> None:
    """Delete every netns whose name starts with `prefix`."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(prefix):
            subprocess.run(["ip", "netns", "del", name], check=False)


def main() -> int:
    args = arguments(__doc__, 5.0).parse_args()
    prefix = f"mwpb{secrets.token_hex(3)}"
    try:
        node_a, node_b = nodes(prefix)
        pairs = {
            "veth direct": direct(prefix),
            "veth stitched": stitched(prefix),
            "vxlan direct": vxlan_direct(prefix),
            "vxlan stitched": vxlan_stitched(prefix, node_a, node_b),
        }
        runs: dict[str, list[float]] = {name: [] for name in pairs}
        frames: dict[str, list[float]] = {name: [] for name in pairs}
        with tempfile.TemporaryDirectory(prefix="mwpb") as work:
            program = compile_framegen(Path(work))
            for _ in range(args.repeat):
                for name, (a, b) in pairs.items():
                    runs[name].append(iperf_mbps(a, b, args.seconds))
                    frames[name].append(frames_per_s(program, a, b, args.seconds))
    finally:
        remove_namespaces(f"{prefix}-")
    result: dict[str, float] = {name: statistics.median(values) for name, values in runs.items()}
    rates = {name: statistics.median(values) for name, values in frames.items()}
    for kind in ("veth", "vxlan"):
        direct_mbps, stitched_mbps = result[f"{kind} direct"], result[f"{kind} stitched"]
        direct_fps, stitched_fps = rates[f"{kind} direct"], rates[f"{kind} stitched"]
        result[f"{kind} ratio"] = stitched_mbps / direct_mbps
        result[f"{kind} frames ratio"] = stitched_fps / direct_fps
        print(
            f"{kind}: TCP direct {direct_mbps:.0f} Mbit/s, stitched {stitched_mbps:.0f} Mbit/s "
            f"({result[f'{kind} ratio']:.2f}); 64-byte frames direct {direct_fps / 1e3:.0f}k/s, "
            f"stitched {stitched_fps / 1e3:.0f}k/s ({result[f'{kind} frames ratio']:.2f})"
        )
    if args.json is not None:
        args.json.write_text(
            json.dumps({"runs": runs, "frames": frames, "frames_per_s": rates, **result}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
