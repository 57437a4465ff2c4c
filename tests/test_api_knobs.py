"""The test knobs break the server the way a real API server or network does, so
clients' recovery paths can be tested: dropped watches, compaction, slow
answers and half-open watches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes.aio import watch as aio_watch

from meshwire.control.model.topology import PLURAL
from meshwire.tools.api.server import ApiServer
from tests.api_helpers import (
    TOPOLOGIES,
    aio_api,
    call,
    create,
    private_loopback,
    serving,
    sync_api,
    topology,
    wait_until,
)

WATCH = f"/apis/networkop.co.uk/v1beta1/namespaces/default/{PLURAL}?watch=true"


async def knobs(server: ApiServer, **body: Any) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{server.url}/debug/knobs", json=body) as answer,
    ):
        assert answer.status == 200
        state: dict[str, Any] = await answer.json()
        return state


async def test_dropped_watches_end_and_the_client_resumes_without_losing_events(
    server: ApiServer,
) -> None:
    api = sync_api(server.url)
    await call(create, api, topology("r1"))
    seen: list[tuple[str, str]] = []
    async with aio_api(server.url) as aio:
        stream = aio_watch.Watch().stream(
            aio.list_namespaced_custom_object, *TOPOLOGIES, "default", PLURAL
        )
        async with stream:
            async for event in stream:
                seen.append((event["type"], event["raw_object"]["metadata"]["name"]))
                if len(seen) == 1:
                    server.drop_watches()
                    await wait_until(lambda: server.open_watches == 0, "the watch to end")
                    await call(create, api, topology("r2"))
                if len(seen) == 2:
                    await knobs(server, drop_watches=True)
                    await wait_until(lambda: server.open_watches == 0, "the watch to end")
                    await call(create, api, topology("r3"))
                if len(seen) == 3:
                    break
    assert seen == [("ADDED", "r1"), ("ADDED", "r2"), ("ADDED", "r3")]


async def test_compact_knob_makes_older_watches_410(server: ApiServer) -> None:
    api = sync_api(server.url)
    await call(create, api, topology("r1"))
    await call(create, api, topology("r2"))
    state = await knobs(server, compact=True)
    assert state["compactedThrough"] == state["resourceVersion"] == 2

    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{server.url}{WATCH}&resourceVersion=1") as answer,
    ):
        event = json.loads(await answer.content.readline())
    assert event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")


async def test_delay_knob_slows_every_answer(server: ApiServer) -> None:
    await knobs(server, delay_ms=5000)
    impatient = aiohttp.ClientTimeout(total=0.5)
    async with aiohttp.ClientSession(timeout=impatient) as session:
        with pytest.raises(TimeoutError):
            async with session.get(f"{server.url}/healthz"):
                pass
        await knobs(server, delay_ms=0)
        async with session.get(f"{server.url}/healthz") as answer:
            assert await answer.text() == "ok"


async def test_hung_watches_go_silent_until_released(server: ApiServer) -> None:
    bookmarked = f"{server.url}{WATCH}&allowWatchBookmarks=true"
    short_read = aiohttp.ClientTimeout(sock_read=1.0)
    async with aiohttp.ClientSession(timeout=short_read) as session:
        async with session.get(bookmarked) as answer:
            assert json.loads(await answer.content.readline())["type"] == "BOOKMARK"
            server.hang_watches(True)
            await call(create, sync_api(server.url), topology("r1"))
            with pytest.raises(TimeoutError):
                while True:
                    line = await answer.content.readline()
                    assert json.loads(line)["type"] == "BOOKMARK"
        async with session.get(bookmarked) as answer:
            await wait_until(lambda: server.open_watches == 1, "the new watch to open")
            await knobs(server, hang_watches=False)
            assert await answer.content.read() == b""


async def test_knobs_endpoint_exists_only_when_enabled(tmp_path: Path) -> None:
    with private_loopback():
        async with (
            serving(str(tmp_path / "db")) as plain,
            aiohttp.ClientSession() as session,
            session.post(f"{plain.url}/debug/knobs", json={"compact": True}) as answer,
        ):
            assert answer.status == 404
