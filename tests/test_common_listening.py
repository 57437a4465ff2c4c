"""A listen port that is taken is waited for with backoff, and only a port held
past the patience stops the daemon, with an error naming the config key."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterator

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from meshwire.control.common.listening import ListenError, start_patiently
from meshwire.control.common.retries import ExponentialBackoff
from meshwire.control.daemon.http import HealthServer

FAST = (0.02, 0.05)  # retry delays for the tests: base and cap, seconds


@pytest.fixture
def taken() -> Iterator[socket.socket]:
    """A socket listening on a free loopback port: the port is taken until it closes."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder


def port_of(sock: socket.socket) -> int:
    port: int = sock.getsockname()[1]
    return port


async def healthz(port: int) -> str:
    timeout = aiohttp.ClientTimeout(total=5)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(f"http://127.0.0.1:{port}/healthz") as response,
    ):
        return await response.text()


async def test_a_port_taken_for_a_moment_is_served_once_released(
    taken: socket.socket, caplog: pytest.LogCaptureFixture
) -> None:
    port = port_of(taken)
    what = f"metrics.listen 127.0.0.1:{port}"
    server = HealthServer(f"127.0.0.1:{port}", CollectorRegistry(), lambda: "")
    caplog.set_level(logging.WARNING, logger="meshwire.control.common.listening")
    start = asyncio.create_task(
        start_patiently(what, server.start, patience=30, backoff=ExponentialBackoff(*FAST))
    )
    try:
        while not any(what in r.getMessage() for r in caplog.records):
            assert not start.done(), "started although the port was taken"
            await asyncio.sleep(0.01)
        assert "cannot listen yet" in caplog.records[0].getMessage()
        taken.close()
        await asyncio.wait_for(start, 10)
        assert await healthz(port) == "ok\n"
    finally:
        start.cancel()
        await server.stop()


async def test_a_port_still_taken_after_the_patience_is_an_error_naming_the_key(
    taken: socket.socket,
) -> None:
    port = port_of(taken)
    server = HealthServer(f"127.0.0.1:{port}", CollectorRegistry(), lambda: "")
    attempts = 0

    async def start() -> None:
        nonlocal attempts
        attempts += 1
        await server.start()

    with pytest.raises(ListenError) as caught:
        await start_patiently(
            f"metrics.listen 127.0.0.1:{port}",
            start,
            patience=0.3,
            backoff=ExponentialBackoff(*FAST),
        )
    message = str(caught.value)
    assert message.startswith(f"metrics.listen 127.0.0.1:{port}: cannot listen")
    assert "address already in use" in message
    assert attempts > 1
    # The failed attempts left nothing bound: once free, the port can be served.
    taken.close()
    await server.start()
    try:
        assert await healthz(port) == "ok\n"
    finally:
        await server.stop()


async def test_an_error_that_is_not_a_busy_port_is_raised_at_once() -> None:
    attempts = 0

    async def start() -> None:
        nonlocal attempts
        attempts += 1
        raise ValueError("not a listen problem")

    with pytest.raises(ValueError, match="not a listen problem"):
        await start_patiently("metrics.listen x", start, patience=30)
    assert attempts == 1
