"""A StatusApi in memory for the status writer's tests, and a writer started on it."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping

import pytest

from meshwire.control.common.clock import FakeClock
from meshwire.control.reconcile.status_writer import (
    DEFAULT_WRITE_BURST,
    DEFAULT_WRITE_RATE,
    DEFAULT_WRITERS,
    PLACEMENT_FIELDS,
    StatusNotFound,
    StatusRead,
    StatusSuperseded,
    StatusWriter,
)


class FakeStatusApi:
    """Topology statuses in memory; writes can be held in flight or made to fail."""

    def __init__(self, *keys: str) -> None:
        self.statuses: dict[str, dict[str, str]] = {key: {} for key in keys}
        self.writes: list[tuple[str, dict[str, str]]] = []
        # The condition (if_container) of each write, in the order of `writes`.
        self.conditions: list[str | None] = []
        self.fail_next: Counter[str] = Counter()
        self.gate = asyncio.Event()
        self.gate.set()
        self.in_flight: Counter[str] = Counter()
        self.most_in_flight_per_key = 0
        # Bumped by every write that lands, as an API server's resourceVersion.
        self.resource_version = 0

    async def patch_status(
        self, namespace: str, name: str, status: dict[str, str], if_container: str | None = None
    ) -> str:
        key = f"{namespace}/{name}"
        self.writes.append((key, dict(status)))
        self.conditions.append(if_container)
        self.in_flight[key] += 1
        self.most_in_flight_per_key = max(self.most_in_flight_per_key, self.in_flight[key])
        try:
            await self.gate.wait()
            if key not in self.statuses:
                raise StatusNotFound(f"topology {key}: not found")
            if self.fail_next[key]:
                self.fail_next[key] -= 1
                raise ConnectionError("api server unreachable")
            holder = self.statuses[key].get("container_id", "")
            if if_container is not None and holder != if_container:
                found = {f: self.statuses[key].get(f, "") for f in PLACEMENT_FIELDS}
                raise StatusSuperseded(
                    f"topology {key}: names {holder!r}, not {if_container!r}",
                    StatusRead(found, str(self.resource_version)),
                )
            self.statuses[key].update(status)
            self.resource_version += 1
            return str(self.resource_version)
        finally:
            self.in_flight[key] -= 1

    def writes_to(self, key: str) -> list[dict[str, str]]:
        return [fields for written, fields in self.writes if written == key]


class HeardWrites:
    """A status writer's listener that records what it hears."""

    def __init__(self) -> None:
        self.landed: list[tuple[str, dict[str, str], str]] = []
        self.dropped: list[tuple[str, dict[str, str]]] = []
        # Per drop: what the failed condition's read found (None: no read).
        self.reads: list[StatusRead | None] = []

    def status_landed(self, key: str, fields: Mapping[str, str], resource_version: str) -> None:
        self.landed.append((key, dict(fields), resource_version))

    def status_dropped(
        self, key: str, fields: Mapping[str, str], read: StatusRead | None = None
    ) -> None:
        self.dropped.append((key, dict(fields)))
        self.reads.append(read)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def started(
    api: FakeStatusApi,
    clock: FakeClock,
    *,
    rate: float = DEFAULT_WRITE_RATE,
    burst: int = DEFAULT_WRITE_BURST,
    writers: int = DEFAULT_WRITERS,
    listener: HeardWrites | None = None,
) -> StatusWriter:
    writer = StatusWriter(
        api, clock=clock, rate=rate, burst=burst, writers=writers, listener=listener
    )
    writer.start()
    return writer
