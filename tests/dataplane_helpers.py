"""Fixtures for dataplane tests: pods as network namespaces with a TAP, workers on loopback.

Every netns is named `mwt<random hex>...` and removed in teardown (which also
deletes the TAPs inside); every worker is stopped by its own PID.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

from meshwire.base.netns_thread import call_in_netns
from meshwire.dataplane.handle import WorkerHandle
from meshwire.dataplane.messages import AddWire
from meshwire.dataplane.tap import TapSpec, open_tap_in
from meshwire.dataplane.worker import WorkerConfig

NODE = "127.0.0.1"
ETH_P_ALL = 0x0003


def sh(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


@dataclass
class Pod:
    netns: str  # the name under /var/run/netns
    tap: str
    ip: str  # CIDR
    fd: int  # control's own fd on the TAP

    @property
    def path(self) -> str:
        return f"/var/run/netns/{self.netns}"

    @property
    def address(self) -> str:
        return self.ip.split("/")[0]


@contextmanager
def netns_prefix() -> Iterator[str]:
    """A unique prefix; every netns named with it is deleted at exit."""
    prefix = f"mwt{secrets.token_hex(3)}"
    try:
        yield prefix
    finally:
        for name in sh("ip", "netns", "list").split():
            if name.startswith(prefix):
                subprocess.run(["ip", "netns", "del", name], check=False)


def make_pod(
    prefix: str, name: str, ip: str, mtu: int = 1500, offloads: bool = True, tap: str = "eth1"
) -> Pod:
    netns = f"{prefix}{name}"
    sh("ip", "netns", "add", netns)
    fd = open_tap_in(f"/var/run/netns/{netns}", TapSpec(tap, mtu=mtu, offloads=offloads))
    sh("ip", "-n", netns, "link", "set", "lo", "up")
    sh("ip", "-n", netns, "addr", "add", ip, "dev", tap)
    sh("ip", "-n", netns, "link", "set", tap, "up")
    return Pod(netns, tap, ip, fd)


def make_node(prefix: str) -> str:
    """A netns standing in for the nodes' underlay: workers talk on its loopback."""
    netns = f"{prefix}node"
    sh("ip", "netns", "add", netns)
    sh("ip", "-n", netns, "link", "set", "lo", "up")
    return f"/var/run/netns/{netns}"


@asynccontextmanager
async def workers(node: str, count: int, **config: Any) -> AsyncIterator[list[WorkerHandle]]:
    """`count` workers serving on the loopback of netns `node`, stopped at exit."""
    started: list[WorkerHandle] = []
    try:
        for _ in range(count):
            config_k = WorkerConfig(netns=node, listen_host=NODE, report_interval=0.1, **config)
            started.append(await WorkerHandle.start(config_k))
        yield started
    finally:
        for handle in started:
            await handle.stop()


async def connect(
    a: Pod, worker_a: WorkerHandle, id_a: int, b: Pod, worker_b: WorkerHandle, id_b: int,
    namespace: str = "lab",
) -> None:  # fmt: skip
    """Wires pod a's TAP to pod b's, as the two nodes' control planes would."""
    await worker_a.add_wire(AddWire(id_a, namespace, NODE, worker_b.data_port, id_b), a.fd)
    await worker_b.add_wire(AddWire(id_b, namespace, NODE, worker_a.data_port, id_a), b.fd)


def ping(pod: Pod, address: str, count: int = 3, size: int = 56) -> bool:
    result = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            pod.netns,
            "ping",
            "-c",
            str(count),
            "-i",
            "0.2",
            "-W",
            "2",
            "-s",
            str(size),
            "-M",
            "do",
            address,
        ],
        capture_output=True,
        check=False,
    )
    return result.returncode == 0


async def wait_until(condition: Callable[[], bool], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within}s: {condition}")
        await asyncio.sleep(0.05)


def packet_socket(pod: Pod) -> socket.socket:
    """An AF_PACKET socket bound to the pod's TAP, inside its netns."""

    def bind() -> socket.socket:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        sock.bind((pod.tap, 0))
        return sock

    return call_in_netns(pod.path, bind)


def close_pods(*pods: Pod) -> None:
    for pod in pods:
        os.close(pod.fd)
