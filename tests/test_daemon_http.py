"""The daemon's HTTP endpoint binds the address `metrics.listen` names, either family."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from api_helpers import private_loopback
from prometheus_client import CollectorRegistry

from meshwire.control.daemon.http import HealthServer


def free_port() -> int:
    """A port free on both loopbacks now (the kernel's pick for a dual-stack socket)."""
    with socket.socket(socket.AF_INET6) as sock:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
async def served(request: pytest.FixtureRequest) -> AsyncIterator[int]:
    """A HealthServer on `request.param` with `{port}` filled in; its port."""
    port = free_port()
    server = HealthServer(request.param.format(port=port), CollectorRegistry(), lambda: "")
    await server.start()
    yield port
    await server.stop()


async def status(url: str) -> int | None:
    """The answer's status, or None if nothing answered."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
            session.get(url) as answer,
        ):
            return answer.status
    except aiohttp.ClientConnectionError:
        return None


@pytest.mark.parametrize("served", [":{port}"], indirect=True)
async def test_no_host_serves_ipv4_and_ipv6(served: int) -> None:
    assert await status(f"http://127.0.0.1:{served}/healthz") == 200
    assert await status(f"http://[::1]:{served}/healthz") == 200


@pytest.mark.parametrize("served", ["[::1]:{port}"], indirect=True)
async def test_an_ipv6_host_in_brackets_serves_that_address_only(served: int) -> None:
    assert await status(f"http://[::1]:{served}/readyz") == 200
    assert await status(f"http://127.0.0.1:{served}/readyz") is None


@pytest.mark.parametrize("served", ["127.0.0.1:{port}"], indirect=True)
async def test_an_ipv4_host_serves_that_address_only(served: int) -> None:
    assert await status(f"http://127.0.0.1:{served}/healthz") == 200
    assert await status(f"http://[::1]:{served}/healthz") is None


async def get(url: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
        session.get(url) as answer,
    ):
        return answer.status, await answer.text()


async def test_links_answers_the_report_for_the_state_asked_and_400_for_a_bad_one() -> None:
    asked: list[tuple[str, bool]] = []

    async def links(state: str, counters: bool) -> list[dict[str, Any]]:
        asked.append((state, counters))
        if state == "bogus":
            raise ValueError("state 'bogus' is not one of pending, done, error")
        return [{"key": "lab/1", "state": state or "done"}]

    port = free_port()
    server = HealthServer(f"127.0.0.1:{port}", CollectorRegistry(), lambda: "", links)
    await server.start()
    try:
        every = await get(f"http://127.0.0.1:{port}/links")
        failing = await get(f"http://127.0.0.1:{port}/links?state=error")
        bad = await get(f"http://127.0.0.1:{port}/links?state=bogus")
        counted = await get(f"http://127.0.0.1:{port}/links?counters=1")
    finally:
        await server.stop()

    assert (every[0], json.loads(every[1])) == (200, [{"key": "lab/1", "state": "done"}])
    assert (failing[0], json.loads(failing[1])) == (200, [{"key": "lab/1", "state": "error"}])
    assert bad == (400, "state 'bogus' is not one of pending, done, error\n")
    assert counted[0] == 200
    assert asked == [("", False), ("error", False), ("bogus", False), ("", True)]


async def test_placement_answers_the_pods_placement_as_read_and_names_what_is_wrong() -> None:
    def placement(pod: str) -> dict[str, Any] | None:
        if pod != "lab/r1":
            return None
        return {"src_ip": "169.254.0.11", "net_ns": "/var/run/netns/x", "deriving": False}

    port = free_port()
    server = HealthServer(f"127.0.0.1:{port}", CollectorRegistry(), lambda: "", None, placement)
    await server.start()
    try:
        known = await get(f"http://127.0.0.1:{port}/placement?pod=lab/r1")
        unknown = await get(f"http://127.0.0.1:{port}/placement?pod=lab/r9")
        bad = await get(f"http://127.0.0.1:{port}/placement?pod=r1")
    finally:
        await server.stop()

    assert known[0] == 200
    assert json.loads(known[1]) == {
        "src_ip": "169.254.0.11", "net_ns": "/var/run/netns/x", "deriving": False
    }  # fmt: skip
    assert unknown == (404, "no Topology lab/r9\n")
    assert bad == (400, "pod: give it as NAMESPACE/NAME\n")


OFF_LOOPBACK = "192.0.2.1"  # TEST-NET-1, on the private netns's lo


async def add_off_loopback_address(ns: str) -> None:
    """OFF_LOOPBACK on lo of netns `ns`: a client connecting to it there comes from an
    address that is not loopback."""
    argv = ["ip", "-n", ns, "addr", "add", f"{OFF_LOOPBACK}/32", "dev", "lo"]
    process = await asyncio.create_subprocess_exec(*argv)
    assert await process.wait() == 0


async def answers(url: str, token: str = "") -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
        session.get(url, headers=headers) as answer,
    ):
        return answer.status, await answer.text()


async def test_links_and_placement_answer_off_loopback_only_with_the_token() -> None:
    asked: list[str] = []

    async def links(state: str, counters: bool) -> list[dict[str, Any]]:
        asked.append("links")
        return []

    def placement(pod: str) -> dict[str, Any] | None:
        asked.append("placement")
        return {"src_ip": "", "net_ns": "", "deriving": False}

    with private_loopback() as ns:
        await add_off_loopback_address(ns)
        with socket.socket() as probe:
            probe.bind((OFF_LOOPBACK, 0))
            port = probe.getsockname()[1]
        server = HealthServer(
            f"{OFF_LOOPBACK}:{port}", CollectorRegistry(), lambda: "", links, placement, "s3cret"
        )
        await server.start()
        base = f"http://{OFF_LOOPBACK}:{port}"
        try:
            bare = [await answers(f"{base}{p}") for p in ("/links", "/placement?pod=a/b")]
            wrong = [await answers(f"{base}{p}", "guess") for p in ("/links", "/placement?pod=a/b")]
            assert asked == []  # nothing asked of the daemon for a refused request
            right = [
                await answers(f"{base}{p}", "s3cret") for p in ("/links", "/placement?pod=a/b")
            ]
            public = [await answers(f"{base}{p}") for p in ("/metrics", "/healthz", "/readyz")]
        finally:
            await server.stop()

    assert [code for code, _ in bare + wrong] == [401] * 4
    assert "token" in bare[0][1]
    assert [code for code, _ in right] == [200, 200]
    assert asked == ["links", "placement"]
    assert [code for code, _ in public] == [200, 200, 200]


async def test_without_a_token_off_loopback_is_refused_and_loopback_still_answered() -> None:
    with private_loopback() as ns:
        await add_off_loopback_address(ns)
        port = free_port()
        server = HealthServer(f":{port}", CollectorRegistry(), lambda: "")
        await server.start()
        try:
            off = await answers(f"http://{OFF_LOOPBACK}:{port}/links", "")
            empty = await answers(f"http://{OFF_LOOPBACK}:{port}/links", " ")
            v4 = await answers(f"http://127.0.0.1:{port}/links")
            v6 = await answers(f"http://[::1]:{port}/links")
        finally:
            await server.stop()
    assert (off[0], empty[0]) == (401, 401)
    assert (v4[0], v6[0]) == (200, 200)
