"""The real StatusApi: the client's merge patch of `/status`, on the wire and end to end.

Each test runs in a network namespace of its own (anonymous: it vanishes with
its last socket), so it depends on nothing but its own loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from aiohttp import web
from kubernetes.aio.client import ApiClient, ApiException, Configuration, CustomObjectsApi

from meshwire.control.model.topology import GROUP, PLURAL, VERSION
from meshwire.control.reconcile.status_writer import (
    KubeStatusApi,
    StatusNotFound,
    StatusRead,
    StatusSuperseded,
    StatusWriter,
)

CLONE_NEWNET = 0x40000000


@pytest.fixture(autouse=True)
def own_loopback() -> Iterator[None]:
    """Move this thread (the event loop's) into a fresh netns with lo up; move it back after."""
    libc = ctypes.CDLL(None, use_errno=True)
    original = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        if libc.unshare(CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) for the test's own loopback")
        try:
            subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
            yield
        finally:
            if libc.setns(original, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to the test's original netns")
    finally:
        os.close(original)


class RecordingServer:
    """Answers every request with a canned status code and remembers what it was sent."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str, Any]] = []
        self.answer = 200
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _handle(self, request: web.Request) -> web.Response:
        body = json.loads(await request.text() or "null")
        self.requests.append((request.method, request.path, request.content_type, body))
        if self.answer == 200:
            return web.json_response({"apiVersion": f"{GROUP}/{VERSION}", "kind": "Topology"})
        return web.json_response(
            {"kind": "Status", "status": "Failure", "code": self.answer}, status=self.answer
        )

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def recorder() -> AsyncIterator[RecordingServer]:
    server = RecordingServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def client_for() -> AsyncIterator[list[ApiClient]]:
    clients: list[ApiClient] = []
    try:
        yield clients
    finally:
        for client in clients:
            # The generated client leaves close() unannotated.
            await cast(Any, client).close()


def api_client(url: str, clients: list[ApiClient]) -> ApiClient:
    client = ApiClient(Configuration(host=url))
    clients.append(client)
    return client


async def test_a_status_write_is_one_merge_patch_of_the_status_subresource(
    recorder: RecordingServer, client_for: list[ApiClient]
) -> None:
    api = KubeStatusApi(api_client(recorder.url, client_for))
    await api.patch_status("lab", "r1", {"src_ip": "10.0.0.1", "plumbing_error": ""})
    assert recorder.requests == [
        (
            "PATCH",
            f"/apis/{GROUP}/{VERSION}/namespaces/lab/{PLURAL}/r1/status",
            "application/merge-patch+json",
            {"status": {"src_ip": "10.0.0.1", "plumbing_error": ""}},
        )
    ]


async def test_a_404_means_the_topology_is_gone_and_other_errors_are_failures(
    recorder: RecordingServer, client_for: list[ApiClient]
) -> None:
    api = KubeStatusApi(api_client(recorder.url, client_for))
    recorder.answer = 404
    with pytest.raises(StatusNotFound, match="lab/r1"):
        await api.patch_status("lab", "r1", {"src_ip": "10.0.0.1"})
    recorder.answer = 500
    with pytest.raises(ApiException):
        await api.patch_status("lab", "r1", {"src_ip": "10.0.0.1"})


async def test_status_written_through_the_embedded_api_reads_back_and_spec_is_untouched(
    tmp_path: Path, client_for: list[ApiClient]
) -> None:
    server_module = pytest.importorskip("meshwire.tools.api.server")
    server = server_module.ApiServer(str(tmp_path / "api.db"), port=0)
    await server.start()
    try:
        client = api_client(server.url, client_for)
        objects = CustomObjectsApi(client)
        for name, peer in (("r1", "r2"), ("r2", "r1")):
            links = [{"uid": 1, "peer_pod": peer, "local_intf": "eth1", "peer_intf": "eth1"}]
            await objects.create_namespaced_custom_object(
                GROUP,
                VERSION,
                "lab",
                PLURAL,
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "Topology",
                    "metadata": {"name": name, "namespace": "lab"},
                    "spec": {"links": links},
                },
            )

        writer = StatusWriter(KubeStatusApi(client))
        writer.start()
        writer.set("lab/r1", src_ip="10.0.0.1", net_ns="/proc/42/ns/net", container_id="c1")
        writer.set("lab/r2", plumbing_error="eth1: peer lab/r1 not ready")
        writer.set("lab/deleted", src_ip="10.0.0.3")
        await asyncio.wait_for(writer.flush(), timeout=10)
        # A later write of one field leaves the others as they are.
        writer.set("lab/r1", plumbing_error="")
        writer.set("lab/r2", plumbing_error="")
        await asyncio.wait_for(writer.flush(), timeout=10)
        await writer.close()

        r1 = cast(
            dict[str, Any],
            await objects.get_namespaced_custom_object(GROUP, VERSION, "lab", PLURAL, "r1"),
        )
        r2 = cast(
            dict[str, Any],
            await objects.get_namespaced_custom_object(GROUP, VERSION, "lab", PLURAL, "r2"),
        )
        assert r1["status"] == {
            "src_ip": "10.0.0.1",
            "net_ns": "/proc/42/ns/net",
            "container_id": "c1",
            "plumbing_error": "",
        }
        assert r2["status"] == {"plumbing_error": ""}
        assert r1["spec"]["links"] == [
            {"uid": 1, "peer_pod": "r2", "local_intf": "eth1", "peer_intf": "eth1"}
        ]
    finally:
        await server.stop()


@contextlib.asynccontextmanager
async def embedded_api_with(
    tmp_path: Path, client_for: list[ApiClient], status: dict[str, str]
) -> AsyncIterator[tuple[KubeStatusApi, CustomObjectsApi]]:
    """An embedded API holding Topology lab/r1 with `status`, and the two clients to it."""
    server_module = pytest.importorskip("meshwire.tools.api.server")
    server = server_module.ApiServer(str(tmp_path / "api.db"), port=0)
    await server.start()
    try:
        client = api_client(server.url, client_for)
        objects = CustomObjectsApi(client)
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Topology",
            "metadata": {"name": "r1", "namespace": "lab"},
            "spec": {"links": []},
        }
        await objects.create_namespaced_custom_object(GROUP, VERSION, "lab", PLURAL, body)
        await KubeStatusApi(client).patch_status("lab", "r1", status)
        yield KubeStatusApi(client), objects
    finally:
        await server.stop()


async def status_of(objects: CustomObjectsApi) -> dict[str, str]:
    obj = await objects.get_namespaced_custom_object(GROUP, VERSION, "lab", PLURAL, "r1")
    return cast(dict[str, Any], obj)["status"]


PLACED_B = {"src_ip": "10.0.0.3", "net_ns": "/var/run/netns/b", "container_id": "b"}
CLEARED = {"src_ip": "", "net_ns": "", "container_id": ""}


async def test_a_conditional_write_lands_while_the_status_names_its_container(
    tmp_path: Path, client_for: list[ApiClient]
) -> None:
    async with embedded_api_with(tmp_path, client_for, PLACED_B) as (api, objects):
        await api.patch_status("lab", "r1", CLEARED, if_container="b")
        assert await status_of(objects) == CLEARED


async def test_a_write_returns_the_resource_version_the_object_reached(
    tmp_path: Path, client_for: list[ApiClient]
) -> None:
    async with embedded_api_with(tmp_path, client_for, PLACED_B) as (api, objects):
        first = await api.patch_status("lab", "r1", CLEARED, if_container="b")
        second = await api.patch_status("lab", "r1", PLACED_B)
        current = cast(
            dict[str, Any],
            await objects.get_namespaced_custom_object(GROUP, VERSION, "lab", PLURAL, "r1"),
        )
        assert int(first) < int(second)
        assert second == current["metadata"]["resourceVersion"]


async def test_a_conditional_write_for_another_container_is_superseded_and_changes_nothing(
    tmp_path: Path, client_for: list[ApiClient]
) -> None:
    # The pod's old node clears its placement late, after the new node wrote its own.
    async with embedded_api_with(tmp_path, client_for, PLACED_B) as (api, objects):
        with pytest.raises(StatusSuperseded, match="names container b, not a") as superseded:
            await api.patch_status("lab", "r1", CLEARED, if_container="a")
        assert await status_of(objects) == PLACED_B
        # It says what the status names instead, and at which version.
        current = cast(
            dict[str, Any],
            await objects.get_namespaced_custom_object(GROUP, VERSION, "lab", PLURAL, "r1"),
        )
        version = current["metadata"]["resourceVersion"]
        assert superseded.value.read == StatusRead(PLACED_B, version)


async def test_a_conditional_write_overtaken_between_its_read_and_its_patch_is_a_conflict(
    tmp_path: Path, client_for: list[ApiClient]
) -> None:
    async with embedded_api_with(tmp_path, client_for, PLACED_B) as (api, objects):
        read = api._api.get_namespaced_custom_object_status

        async def read_then_overtaken(*args: Any, **kwargs: Any) -> Any:
            current = await read(*args, **kwargs)
            await KubeStatusApi(objects.api_client).patch_status("lab", "r1", {"container_id": "c"})
            return current

        api._api.get_namespaced_custom_object_status = read_then_overtaken  # type: ignore[method-assign]
        with pytest.raises(ApiException) as caught:
            await api.patch_status("lab", "r1", CLEARED, if_container="b")
        assert caught.value.status == 409
        assert (await status_of(objects))["container_id"] == "c"
