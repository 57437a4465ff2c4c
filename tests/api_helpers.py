"""Shared pieces of the embedded API tests: a private loopback, a running server, clients.

Every test talks to its server over the loopback of a network namespace it
creates (`mwt<hex>`): the host's own loopback is left alone. `private_loopback`
moves the calling thread (the test's event loop thread) into that namespace;
sockets, threads and processes it creates from then on live there.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import secrets
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.aio import client as aio_client

from meshwire.control.model.topology import API_VERSION, GROUP, KIND, PLURAL, VERSION
from meshwire.tools.api.server import ApiServer
from tests.paths import MESHNET

FIXTURES = MESHNET
# Generous: a bounded wait for a condition, never a timing assertion.
WAIT = 15.0
TOPOLOGIES = (GROUP, VERSION)

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    # os.setns arrives in Python 3.12; this is the same system call.
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"setns: {os.strerror(code)}")


@contextlib.contextmanager
def private_loopback() -> Iterator[str]:
    """A fresh netns with lo up, entered by this thread; left and deleted on exit."""
    name = f"mwt{secrets.token_hex(4)}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    original = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        target = os.open(f"/run/netns/{name}", os.O_RDONLY)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield name
        finally:
            _setns(original)
    finally:
        os.close(original)
        subprocess.run(["ip", "netns", "del", name], check=False)


@contextlib.asynccontextmanager
async def serving(db_path: str, **options: Any) -> AsyncIterator[ApiServer]:
    """An ApiServer on a free port of the current netns; stopped on exit, even on failure."""
    server = ApiServer(db_path, **options)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@contextlib.asynccontextmanager
async def private_server(tmp_path: Path, **options: Any) -> AsyncIterator[ApiServer]:
    """A private loopback and an ApiServer on it with a fresh db, knobs on, fast bookmarks.

    The calling thread stays in the private netns until exit, so clients made
    inside the block reach the server.
    """
    options = {"knobs_enabled": True, "bookmark_interval": 0.2, **options}
    with private_loopback():
        async with serving(str(tmp_path / "topologies.db"), **options) as server:
            yield server


def sync_api(url: str) -> Any:
    """The official sync client's CustomObjectsApi for `url`."""
    return client.CustomObjectsApi(client.ApiClient(client.Configuration(host=url)))


@contextlib.asynccontextmanager
async def aio_api(url: str) -> AsyncIterator[Any]:
    """The official `kubernetes.aio` CustomObjectsApi for `url`, closed on exit."""
    api_client = aio_client.ApiClient(aio_client.Configuration(host=url))
    try:
        yield aio_client.CustomObjectsApi(api_client)
    finally:
        await api_client.close()


def topology(name: str, *peers: str, namespace: str = "default") -> dict[str, Any]:
    """A Topology as a user writes it: one link per peer, eth1.. in order."""
    links = [
        {"uid": i + 1, "peer_pod": peer, "local_intf": f"eth{i + 1}", "peer_intf": f"eth{i + 1}"}
        for i, peer in enumerate(peers)
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"links": links},
    }


def create(api: Any, obj: dict[str, Any]) -> dict[str, Any]:
    namespace = obj["metadata"]["namespace"]
    created: dict[str, Any] = api.create_namespaced_custom_object(
        *TOPOLOGIES, namespace, PLURAL, obj
    )
    return created


def get(api: Any, name: str, namespace: str = "default") -> dict[str, Any]:
    obj: dict[str, Any] = api.get_namespaced_custom_object(*TOPOLOGIES, namespace, PLURAL, name)
    return obj


async def call(func: Any, *args: Any, **kwargs: Any) -> Any:
    """Runs a sync client call off the event loop (the server runs on the loop)."""
    return await asyncio.to_thread(func, *args, **kwargs)


async def wait_until(condition: Any, what: str) -> None:
    """Polls `condition()` until true; fails naming `what` after WAIT seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {WAIT}s waiting for {what}")
        await asyncio.sleep(0.02)
