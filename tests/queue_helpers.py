"""Shared by the queue, retries and status-writer tests: wait on the event loop, not on time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def settle(turns: int = 20) -> None:
    """Give every runnable task a few turns of the event loop; no wall time passes."""
    for _ in range(turns):
        await asyncio.sleep(0)


async def until(condition: Callable[[], bool], within: float = 5.0) -> None:
    """Yield to the event loop until `condition()` holds; fail after a generous `within` s."""
    async with asyncio.timeout(within):
        while True:
            if condition():
                return
            await asyncio.sleep(0)
