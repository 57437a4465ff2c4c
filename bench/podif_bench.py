"""TCP throughput of a stitched pair of pod ends against a direct veth pair, same run.

    .venv/bin/python bench/podif_bench.py [--seconds 5] [--repeat 3] [--json FILE]

Every pod end meshwire makes is a veth whose peer is in the node's netns, and
a same-node link is the two node sides stitched together with tc (clsact,
u32 match-all, mirred redirect: control/links/tc.py). This measures what the
stitch costs against the kernel's floor, one veth pair straight between two
pods, on the same machine in the same run:

  (a) direct:   pod a -- veth -- pod b;
  (b) stitched: pod a -- veth -- [node: stitch] -- veth -- pod b, built by
      meshwire's own veth driver (`LinkKind.VETH` row) in a node netns of
      the bench's own.

Each is iperf3 TCP (one stream, `--seconds` long) from a to b; the figures
are medians of `--repeat` runs, alternating (a) and (b) so load on the
machine falls on both alike. Printed: each throughput and stitched/direct.
Namespaces are named `mwpb<hex>-*` and removed at the end, even on failure.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

from meshwire.control.links.driver import Drivers, kernel_drivers
from meshwire.control.tables.links import End, LinkKind, LinkRow

NETNS_DIR = "/var/run/netns"


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
        mtu=1500,
    )
    Drivers(kernel_drivers(host_netns=node)).update(row)
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    prefix = f"mwpb{secrets.token_hex(3)}"
    try:
        pairs = {"direct": direct(prefix), "stitched": stitched(prefix)}
        runs: dict[str, list[float]] = {name: [] for name in pairs}
        for _ in range(args.repeat):
            for name, (a, b) in pairs.items():
                runs[name].append(iperf_mbps(a, b, args.seconds))
    finally:
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for line in listed.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith(f"{prefix}-"):
                subprocess.run(["ip", "netns", "del", name], check=False)
    result = {name: statistics.median(values) for name, values in runs.items()}
    result["ratio"] = result["stitched"] / result["direct"]
    print(
        f"TCP direct veth {result['direct']:.0f} Mbit/s, stitched {result['stitched']:.0f} "
        f"Mbit/s: stitched/direct {result['ratio']:.2f}"
    )
    if args.json is not None:
        args.json.write_text(json.dumps({"runs": runs, **result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
