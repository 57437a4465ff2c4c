"""Throughput, frame rate and latency of a gRPC wire against the kernel's links.

    .venv/bin/python bench/wire_bench.py [--seconds 4] [--json]

Two simulated nodes (network namespaces joined by a veth underlay) and pods
(namespaces with one interface `eth1`); per configuration it measures, between
one pod pair (or one pair per worker):
  - iperf3 TCP throughput,
  - 64-byte frame rate: iperf3 UDP with 22-byte payloads (14 + 20 + 8 + 22 = 64
    bytes on the wire, no FCS), frames received per second,
  - ping RTT (average of 50 pings, 10 ms apart).
Configurations: (a) a kernel veth pair, (b) kernel VXLAN over the underlay,
(c) the meshwire wire with batching, (d) the wire with one frame per gRPC
message; (c) and (d) with 1 and 2 workers per node (2 workers: two pod pairs,
one wire each, measured at once and summed). Ratios are against (a).
Everything it creates is named mwb<hex>... and removed at the end; traffic
stays inside those namespaces.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from meshwire.dataplane.handle import WorkerHandle
from meshwire.dataplane.messages import AddWire
from meshwire.dataplane.tap import TapSpec, open_tap_in
from meshwire.dataplane.worker import WorkerConfig

UNDERLAY = ("169.254.77.1", "169.254.77.2")


def sh(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


@dataclass(frozen=True)
class Pod:
    netns: str
    ip: str


@dataclass
class Result:
    name: str
    tcp_gbps: float
    frames_per_s: float
    rtt_ms: float
    drops: int = 0


class Lab:
    """Network namespaces named with one random prefix, all deleted by `close`."""

    def __init__(self) -> None:
        self.prefix = f"mwb{secrets.token_hex(3)}"
        self.count = 0

    def netns(self, role: str) -> str:
        self.count += 1
        name = f"{self.prefix}{role}{self.count}"
        sh("ip", "netns", "add", name)
        sh("ip", "-n", name, "link", "set", "lo", "up")
        return name

    def delete(self, *names: str) -> None:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], check=False)

    def close(self) -> None:
        for name in sh("ip", "netns", "list").split():
            if name.startswith(self.prefix):
                subprocess.run(["ip", "netns", "del", name], check=False)


def underlay(lab: Lab) -> tuple[str, str]:
    one, two = lab.netns("n"), lab.netns("n")
    sh(
        "ip",
        "-n",
        one,
        "link",
        "add",
        "u0",
        "mtu",
        "9000",
        "type",
        "veth",
        "peer",
        "u0",
        "netns",
        two,
        "mtu",
        "9000",
    )
    for node, address in zip((one, two), UNDERLAY, strict=True):
        sh("ip", "-n", node, "addr", "add", f"{address}/24", "dev", "u0")
        sh("ip", "-n", node, "link", "set", "u0", "up")
    return one, two


def address(pod: str, ip: str) -> None:
    sh("ip", "-n", pod, "addr", "add", f"{ip}/24", "dev", "eth1")
    sh("ip", "-n", pod, "link", "set", "eth1", "up")


def veth_pair(lab: Lab, subnet: int) -> tuple[Pod, Pod]:
    a, b = lab.netns("p"), lab.netns("p")
    sh("ip", "-n", a, "link", "add", "eth1", "type", "veth", "peer", "eth1", "netns", b)
    address(a, f"10.77.{subnet}.1")
    address(b, f"10.77.{subnet}.2")
    return Pod(a, f"10.77.{subnet}.1"), Pod(b, f"10.77.{subnet}.2")


def vxlan_pair(lab: Lab, nodes: tuple[str, str], subnet: int) -> tuple[Pod, Pod]:
    pods = []
    for k, node in enumerate(nodes):
        pod = lab.netns("p")
        sh(
            "ip",
            "-n",
            node,
            "link",
            "add",
            "vx0",
            "mtu",
            "1500",
            "type",
            "vxlan",
            "id",
            "4242",
            "local",
            UNDERLAY[k],
            "remote",
            UNDERLAY[1 - k],
            "dstport",
            "4789",
            "dev",
            "u0",
        )
        sh("ip", "-n", node, "link", "set", "vx0", "netns", pod)
        sh("ip", "-n", pod, "link", "set", "vx0", "name", "eth1")
        address(pod, f"10.77.{subnet}.{k + 1}")
        pods.append(Pod(pod, f"10.77.{subnet}.{k + 1}"))
    return pods[0], pods[1]


async def wire_pairs(
    lab: Lab, nodes: tuple[str, str], workers: int, batch_frames: int, stack: AsyncExitStack
) -> tuple[list[tuple[Pod, Pod]], list[WorkerHandle]]:
    """`workers` pod pairs, pair k wired through worker k of each node."""
    handles: list[list[WorkerHandle]] = [[], []]
    for k, node in enumerate(nodes):
        for _ in range(workers):
            config = WorkerConfig(
                netns=f"/var/run/netns/{node}", listen_host=UNDERLAY[k], batch_frames=batch_frames
            )
            handle = await WorkerHandle.start(config)
            stack.push_async_callback(handle.stop)
            handles[k].append(handle)
    pairs = []
    for k in range(workers):
        ends = []
        for side in (0, 1):
            pod = lab.netns("p")
            fd = open_tap_in(f"/var/run/netns/{pod}", TapSpec("eth1", offloads=True))
            peer = handles[1 - side][k]
            wire = AddWire(10 + side, "bench", UNDERLAY[1 - side], peer.data_port, 11 - side)
            await handles[side][k].add_wire(wire, fd)
            address(pod, f"10.77.{50 + k}.{side + 1}")
            ends.append(Pod(pod, f"10.77.{50 + k}.{side + 1}"))
        pairs.append((ends[0], ends[1]))
    return pairs, [h for side in handles for h in side]


def in_ns(pod: Pod, *args: str) -> list[str]:
    return ["ip", "netns", "exec", pod.netns, *args]


def iperf(client: Pod, server: Pod, seconds: float, udp: bool) -> dict[str, Any]:
    """The `end` section of iperf3's JSON report; the server is stopped by its PID."""
    listener = subprocess.Popen(
        in_ns(server, "iperf3", "-s", "-B", server.ip), stdout=subprocess.DEVNULL
    )
    try:
        mode = ["-u", "-b", "0", "-l", "22"] if udp else []
        command = in_ns(client, "iperf3", "-c", server.ip, "-t", str(seconds), "-J", *mode)
        for _ in range(50):
            run = subprocess.run(
                command, capture_output=True, text=True, check=False, timeout=seconds + 30
            )
            output = json.loads(run.stdout) if run.stdout.startswith("{") else {}
            error = str(output.get("error", "" if run.returncode == 0 else run.stdout[-300:]))
            if not error:
                report: dict[str, Any] = output["end"]
                return report
            if "unable to connect" not in error:
                raise RuntimeError(f"iperf3 {client.ip} -> {server.ip}: {error}")
            time.sleep(0.1)  # the server is not listening yet
        raise RuntimeError(f"iperf3 {client.ip} -> {server.ip}: {error}")
    finally:
        listener.terminate()
        listener.wait()


def rtt_ms(client: Pod, server: Pod) -> float:
    out = sh(*in_ns(client, "ping", "-c", "50", "-i", "0.01", "-q", server.ip))
    match = re.search(r"= [\d.]+/([\d.]+)/", out)
    if not match:
        raise RuntimeError(f"ping {client.ip} -> {server.ip}: {out}")
    return float(match.group(1))


async def measure(
    name: str, pairs: list[tuple[Pod, Pod]], seconds: float, handles: list[WorkerHandle]
) -> Result:
    def each(run: Callable[[Pod, Pod], float]) -> Awaitable[list[float]]:
        return asyncio.gather(*(asyncio.to_thread(run, a, b) for a, b in pairs))

    def tcp(a: Pod, b: Pod) -> float:
        return float(iperf(a, b, seconds, udp=False)["sum_received"]["bits_per_second"])

    def udp(a: Pod, b: Pod) -> float:
        total = iperf(a, b, seconds, udp=True)["sum"]
        return float(total["packets"] - total["lost_packets"]) / float(total["seconds"])

    rtt = await asyncio.to_thread(rtt_ms, *pairs[0])
    gbps = sum(await each(tcp)) / 1e9
    fps = sum(await each(udp))
    drops = 0
    for handle in handles:
        await handle.next_report()
        drops += sum(c.tx_drops + c.rx_drops for c in handle.wires.values())
    return Result(name, gbps, fps, rtt, drops)


async def bench(seconds: float) -> list[Result]:
    lab = Lab()
    results = []
    try:
        nodes = underlay(lab)
        results.append(await measure("(a) veth", [veth_pair(lab, 1)], seconds, []))
        results.append(await measure("(b) vxlan", [vxlan_pair(lab, nodes, 2)], seconds, []))
        for label, batch in (("(c) wire, batched", 64), ("(d) wire, 1 frame/msg", 1)):
            for workers in (1, 2):
                async with AsyncExitStack() as stack:
                    pairs, handles = await wire_pairs(lab, nodes, workers, batch, stack)
                    name = f"{label}, {workers} worker{'s' if workers > 1 else ''}"
                    results.append(await measure(name, pairs, seconds, handles))
                lab.delete(*(pod.netns for pair in pairs for pod in pair))
    finally:
        lab.close()
    return results


def table(results: list[Result]) -> str:
    base = results[0]
    lines = [
        f"{'configuration':34} {'TCP Gbit/s':>10} {'x veth':>7} {'64B frames/s':>13} "
        f"{'x veth':>7} {'RTT ms':>7} {'x veth':>7} {'drops':>6}"
    ]
    for r in results:
        lines.append(
            f"{r.name:34} {r.tcp_gbps:10.2f} {r.tcp_gbps / base.tcp_gbps:7.3f} "
            f"{r.frames_per_s:13.0f} {r.frames_per_s / base.frames_per_s:7.3f} "
            f"{r.rtt_ms:7.3f} {r.rtt_ms / base.rtt_ms:7.1f} {r.drops:6d}"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="per iperf3 run")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    args = parser.parse_args(argv)
    results = asyncio.run(bench(args.seconds))
    if args.json:
        print(json.dumps([r.__dict__ for r in results], indent=2))
    else:
        print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
