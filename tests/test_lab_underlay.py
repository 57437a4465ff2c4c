"""Simulated nodes: namespaces on a link-local underlay bridge, the API reachable from each."""

from __future__ import annotations

import secrets
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab_helpers import Lab, StubRuntime, in_ns, unique_lab

from meshwire.tools.lab import netns, processes
from meshwire.tools.lab.probe import http_get, tcp_open, wait_until
from meshwire.tools.lab.relay import MODULE

pytestmark = pytest.mark.root


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    with unique_lab(tmp_path) as lab:
        rc = lab.run(
            "up", str(lab.file), "--nodes", "3", "--wait", "0", runtime=StubRuntime(tmp_path)
        )
        assert rc == 0
        yield lab


def test_nodes_ping_each_other_and_the_hub_on_link_local_addresses(lab: Lab) -> None:
    for source, target in (
        ("node1", "169.254.0.12"),
        ("node2", "169.254.0.13"),
        ("node3", "169.254.0.1"),
    ):
        done = in_ns(f"{lab.prefix}{source}", "ping", "-c", "1", "-W", "2", target)
        assert done.returncode == 0, f"{source} -> {target}: {done.stdout}{done.stderr}"


def test_each_node_reaches_the_api_on_the_hub_address(lab: Lab) -> None:
    for node in ("node1", "node3"):
        answer = http_get("169.254.0.1", 8001, "/readyz", netns=f"{lab.prefix}{node}")
        assert answer is not None and answer[0] == 200, node


def test_a_probe_that_connects_to_itself_finds_nothing_listening() -> None:
    """With the probed port the only ephemeral port, connect() meets itself (a TCP
    simultaneous open); the probe must say "not open" and let the port go."""
    ns = f"mwt{secrets.token_hex(4)}p"
    port = 40000 + secrets.randbelow(20000)
    try:
        netns.create(ns)
        done = in_ns(ns, "sysctl", "-w", f"net.ipv4.ip_local_port_range={port} {port}")
        assert done.returncode == 0, done.stderr
        assert not tcp_open("127.0.0.1", port, netns=ns)
        assert http_get("127.0.0.1", port, "/", netns=ns) is None
        listener = netns.socket_in(ns, socket.AF_INET, socket.SOCK_STREAM)
        with listener:
            listener.bind(("127.0.0.1", port))
            listener.listen()
            in_ns(ns, "sysctl", "-w", "net.ipv4.ip_local_port_range=32768 60999")
            assert tcp_open("127.0.0.1", port, netns=ns)
    finally:
        netns.delete(ns)


def test_the_host_namespace_gets_no_link_local_address_or_route(tmp_path: Path) -> None:
    def host_view() -> tuple[str, str]:
        addrs = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True)
        routes = subprocess.run(["ip", "route"], capture_output=True, text=True, check=True)
        return addrs.stdout, routes.stdout

    before = host_view()
    with unique_lab(tmp_path) as lab:
        assert lab.run("up", str(lab.file), "--wait", "0", runtime=StubRuntime(tmp_path)) == 0
        assert host_view() == before


def _echo_forever(listener: socket.socket) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            while data := conn.recv(1024):
                conn.sendall(data)


def test_relay_carries_a_connection_from_one_namespace_into_another(tmp_path: Path) -> None:
    ns_a, ns_b = (f"mwt{secrets.token_hex(4)}{side}" for side in "ab")
    record = None
    listener = None
    try:
        for ns in (ns_a, ns_b):
            netns.create(ns)
        listener = netns.socket_in(ns_b, socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        threading.Thread(target=_echo_forever, args=(listener,), daemon=True).start()
        to = f"127.0.0.1:{listener.getsockname()[1]}"
        argv = [sys.executable, "-m", MODULE, "--listen-netns", ns_a, "--listen", "127.0.0.1:7000"]
        argv += ["--to-netns", ns_b, "--to", to]
        record = processes.start("relay", argv, tmp_path / "relay.log")
        assert wait_until(lambda: tcp_open("127.0.0.1", 7000, netns=ns_a), 10, lambda: None)

        with netns.socket_in(ns_a, socket.AF_INET, socket.SOCK_STREAM) as client:
            client.settimeout(5)
            client.connect(("127.0.0.1", 7000))
            client.sendall(b"through the relay")
            assert client.recv(64) == b"through the relay"
    finally:
        if record is not None:
            processes.stop(record)
        if listener is not None:
            listener.close()
        for ns in (ns_a, ns_b):
            netns.delete(ns)
