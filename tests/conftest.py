"""Fixtures shared by the whole suite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from meshwire.control.api.server import ApiServer
from tests.api_helpers import private_server


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[ApiServer]:
    """meshwire's embedded API on a private loopback address, with its own database."""
    async with private_server(tmp_path) as running:
        yield running
