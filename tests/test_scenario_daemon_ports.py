"""A daemon starting while its listen ports are held by something else waits for
them, and serves on each once it is released, instead of exiting.

The daemon is the real one, with the gRPC wire (a real worker process), in a
private network namespace whose loopback is its node address.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from api_helpers import call, create, private_loopback, sync_api, topology
from scenario_helpers import (
    DaemonNode,
    add_pair,
    api_serving,
    auth_overrides,
    both_up,
    daemon_node,
    read_interfaces,
)

from meshwire.control.common.config import Config, load_config
from meshwire.control.daemon.app import Daemon
from meshwire.control.model.topology import GROUP, PLURAL, VERSION
from meshwire.control.tables.health import State

pytestmark = pytest.mark.root

METRICS, PEER, WORKER = 51100, 51111, 51121
# Read and written by this thread: the sysctl of the netns the thread is in.
RESERVED = Path("/proc/sys/net/ipv4/ip_local_reserved_ports")
WAIT = 30.0


def read_reserved() -> str:
    return RESERVED.read_text().strip()


def write_reserved(value: str) -> None:
    RESERVED.write_text(value)


def place(api: Any, pod: str, status: dict[str, str]) -> None:
    """Write a pod's placement into its Topology status, as its node's daemon would."""
    api.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", PLURAL, pod, {"status": status}
    )


def holding(port: int) -> socket.socket:
    """A socket listening on 127.0.0.1:`port`: a daemon cannot bind it while it is open."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


async def warned(caplog: pytest.LogCaptureFixture, key: str, task: asyncio.Task[None]) -> None:
    """Until the daemon has logged that it waits for `key`; fails if it stopped instead."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not any(r.getMessage().startswith(key) for r in caplog.records):
        if task.done():
            task.result()
            raise AssertionError(f"the daemon stopped instead of waiting for {key}")
        assert loop.time() < deadline, f"no warning about {key} within {WAIT}s"
        await asyncio.sleep(0.02)


async def healthz() -> str:
    timeout = aiohttp.ClientTimeout(total=5)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(f"http://127.0.0.1:{METRICS}/healthz") as response,
    ):
        return await response.text()


async def readyz() -> str:
    timeout = aiohttp.ClientTimeout(total=5)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(f"http://127.0.0.1:{METRICS}/readyz") as response,
    ):
        assert response.status == 503
        return await response.text()


def accepts(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def listen_warnings(caplog: pytest.LogCaptureFixture) -> None:
    """caplog records the daemon's warnings about the ports it waits for."""
    caplog.set_level(logging.WARNING, logger="meshwire.control.common.listening")


def grpc_config(tmp_path: Path) -> Config:
    return load_config(
        None,
        env={},
        overrides={
            "node_name": "node1",
            "node_ip": "127.0.0.1",
            # Nothing serves the API: starting to listen does not need it.
            "api.url": "http://127.0.0.1:1",
            "cni.socket": str(tmp_path / "cni.sock"),
            "cni.state_dir": str(tmp_path / "sandboxes"),
            "metrics.listen": f"127.0.0.1:{METRICS}",
            "peer.listen": f"127.0.0.1:{PEER}",
            "inter_node_link_type": "grpc",
            "workers": "1",
            "dataplane.port_base": str(WORKER),
            **auth_overrides(tmp_path),
        },
    )


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_daemon_whose_ports_are_taken_serves_on_each_once_released(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, listen_warnings: None
) -> None:
    with private_loopback():
        config = grpc_config(tmp_path)
        write_reserved("40000-40002")  # another program's entry, in this test's netns
        holders = {port: holding(port) for port in (METRICS, PEER, WORKER)}
        daemon = Daemon(config)
        task = asyncio.create_task(daemon.run())
        try:
            # The daemon opens its ports in this order, each after the previous.
            await warned(caplog, f"metrics.listen 127.0.0.1:{METRICS}", task)
            # Reserved first, kept with the other entry; the held ports stay held.
            assert read_reserved() == f"40000-40002,{METRICS},{PEER},{WORKER}"
            holders.pop(METRICS).close()
            await warned(caplog, f"dataplane.port_base {WORKER}", task)
            assert await healthz() == "ok\n"
            holders.pop(WORKER).close()
            await warned(caplog, f"peer.listen 127.0.0.1:{PEER}", task)
            assert daemon.wire is not None and not daemon.wire.started
            assert daemon.not_ready().startswith(f"waiting for peer.listen 127.0.0.1:{PEER} (")
            assert f"cannot bind 127.0.0.1:{PEER}: Address already in use" in await readyz()
            holders.pop(PEER).close()

            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT
            while not daemon.wire.started:
                assert not task.done(), "the daemon stopped"
                assert loop.time() < deadline, "the wire did not start once its ports were free"
                await asyncio.sleep(0.02)
            assert accepts(PEER) and accepts(WORKER)
            # Ready now but for the API, which this test does not serve.
            assert daemon.not_ready().startswith("topologies not synced")

            # The worker started on a second try is supervised as any: killed, it is restarted.
            (first,) = daemon.wire.pool.pids().values()
            os.kill(first, signal.SIGKILL)
            deadline = loop.time() + WAIT
            while daemon.wire.pool.pids().get(0) in (None, first):
                assert loop.time() < deadline, "the killed worker was not restarted"
                await asyncio.sleep(0.02)
        finally:
            for holder in holders.values():
                holder.close()
            daemon.stop()
            await asyncio.wait_for(task, WAIT)


async def test_a_daemon_told_to_stop_while_it_waits_stops_and_leaves_no_worker(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, listen_warnings: None
) -> None:
    with private_loopback():
        peer = holding(PEER)
        daemon = Daemon(grpc_config(tmp_path))
        task = asyncio.create_task(daemon.run())
        try:
            # The workers are up when the daemon waits for the Peer service's port.
            await warned(caplog, f"peer.listen 127.0.0.1:{PEER}", task)
            assert daemon.wire is not None
            workers = list(daemon.wire.pool.pids().values())
            assert len(workers) == 1 and running(workers[0])
            daemon.stop()
            await asyncio.wait_for(task, WAIT)
            assert not running(workers[0])
            assert not accepts(METRICS)
        finally:
            peer.close()
            daemon.stop()
            await asyncio.wait_for(task, WAIT)


async def test_the_daemon_process_stops_on_sigterm_while_it_waits_for_its_metrics_port(
    tmp_path: Path,
) -> None:
    config = tmp_path / "daemon.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "node_name": "node1",
                "node_ip": "127.0.0.1",
                "api": {"url": "http://127.0.0.1:1"},
                "cni": {"socket": str(tmp_path / "cni.sock"), "state_dir": str(tmp_path / "sb")},
                "metrics": {"listen": f"127.0.0.1:{METRICS}"},
            }
        )
    )
    with private_loopback(), holding(METRICS):
        argv = [sys.executable, "-m", "meshwire.tools.cli", "daemon", "--config", str(config)]
        daemon = await asyncio.create_subprocess_exec(*argv, stderr=asyncio.subprocess.PIPE)
        try:
            assert daemon.stderr is not None
            logged = b""
            while b"cannot listen yet" not in logged:
                line = await asyncio.wait_for(daemon.stderr.readline(), WAIT)
                assert line, f"the daemon exited instead of waiting: {logged.decode()}"
                logged += line
            assert f"metrics.listen 127.0.0.1:{METRICS}".encode() in logged
            daemon.send_signal(signal.SIGTERM)
            rest = await asyncio.wait_for(daemon.stderr.read(), WAIT)
            assert await daemon.wait() == 0
            assert b"meshwire daemon stopping; links stay up" in rest
        finally:
            if daemon.returncode is None:
                daemon.kill()
                await daemon.wait()


@contextlib.asynccontextmanager
async def grpc_node_while_taken(
    tmp_path: Path, port: int
) -> AsyncIterator[tuple[DaemonNode, Callable[[], None]]]:
    """A daemon with the gRPC wire (`daemon_node`), started while `port` is taken;
    yields it and the function that releases the port."""
    held: list[socket.socket] = []
    async with daemon_node(
        tmp_path,
        before=lambda: held.append(holding(port)),
        overrides={
            "inter_node_link_type": "grpc",
            "workers": "1",
            "metrics.listen": f"127.0.0.1:{METRICS}",
            "peer.listen": f"127.0.0.1:{PEER}",
            "dataplane.port_base": str(WORKER),
        },
    ) as node:
        try:
            yield node, lambda: held.pop().close()
        finally:
            for sock in held:
                sock.close()


async def test_while_the_wire_waits_for_its_ports_pods_are_added_and_veths_built(
    tmp_path: Path, listen_warnings: None
) -> None:
    async with (
        grpc_node_while_taken(tmp_path, PEER) as (node, release),
        api_serving(node) as url,
    ):
        # Two pods on this node: a veth, which needs no wire.
        r1, r2 = await add_pair(node, url)
        await node.wait(lambda: both_up(r1, r2), "the veth up in both pods")
        # The workers may still be starting, before the daemon turns to peer.listen.
        waiting = f"waiting for peer.listen 127.0.0.1:{PEER}"
        await node.wait(lambda: node.daemon.not_ready().startswith(waiting), waiting)
        assert node.daemon.wire is not None and not node.daemon.wire.started
        release()
        await node.wait(lambda: node.daemon.not_ready() == "", "the daemon ready")


async def test_while_the_metrics_port_is_taken_a_grpc_link_is_built_and_waits_for_the_wire(
    tmp_path: Path, listen_warnings: None
) -> None:
    async with (
        grpc_node_while_taken(tmp_path, METRICS) as (node, release),
        api_serving(node) as url,
    ):
        api = sync_api(url)
        await call(create, api, topology("r1", "r2"))
        await call(create, api, topology("r2", "r1"))
        # r2 runs on another node: r1's end of their link is a grpc wire.
        elsewhere = {"src_ip": "127.0.0.2", "net_ns": "/x", "container_id": "c2"}
        await call(place, api, "r2", elsewhere)
        r1 = node.pod_netns("r1")
        assert (await node.cni("ADD", "r1", "c1", r1)).exit == 0
        # The TAP is made and attached: its driver does not wait for the wire.
        assert "eth1" in read_interfaces(r1)
        link = node.daemon.links.health("default/1/r1")
        assert link.state is not State.ERROR, link.message
        assert node.daemon.wire is not None and not node.daemon.wire.started
        waiting = "waiting for metrics.listen"
        await node.wait(lambda: node.daemon.not_ready().startswith(waiting), waiting)
        release()
        await node.wait(lambda: node.daemon.wire.started, "the wire started")
