"""Waiting on the first of several things to happen."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


async def first(*waits: Awaitable[Any], within: float | None) -> None:
    """Return once one of `waits` is done or `within` seconds passed (None: no limit);
    the others are cancelled and awaited, so nothing is left running. What they
    returned or raised is dropped."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
