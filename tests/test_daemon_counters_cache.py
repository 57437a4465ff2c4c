"""`/links?counters=1` reads the kernel at most once per `metrics.counters_interval`.

However many clients poll, the netlink dumps stay bounded: requests within the
interval get the last read, and requests that arrive together share one read.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

from meshwire.control.daemon.link_counters import Counters, CountersCache
from meshwire.control.tables.links import LinkRow


class Reader:
    """Counts reads; each answers its own number as an end's counter."""

    def __init__(self) -> None:
        self.reads = 0
        self.release = threading.Event()
        self.release.set()

    def __call__(self, rows: Sequence[LinkRow]) -> dict[tuple[str, str], Counters]:
        self.release.wait(30)
        self.reads += 1
        return {("ns", "eth1"): {"tx_packets": self.reads}}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_reads_within_the_interval_share_the_last_read() -> None:
    reader, clock = Reader(), Clock()
    cache = CountersCache(2.0, reader, clock)
    first = await cache.read([])
    clock.now += 1.9
    again = await cache.read([])
    assert reader.reads == 1
    assert again == first == {("ns", "eth1"): {"tx_packets": 1}}
    clock.now += 0.1
    assert await cache.read([]) == {("ns", "eth1"): {"tx_packets": 2}}
    assert reader.reads == 2


async def test_requests_arriving_together_make_one_read() -> None:
    reader = Reader()
    reader.release.clear()
    cache = CountersCache(1.0, reader, Clock())
    many = [asyncio.ensure_future(cache.read([])) for _ in range(20)]
    await asyncio.sleep(0)
    reader.release.set()
    answers = await asyncio.gather(*many)
    assert reader.reads == 1
    assert all(answer == answers[0] for answer in answers)


async def test_an_interval_of_zero_reads_every_time() -> None:
    reader = Reader()
    cache = CountersCache(0.0, reader, Clock())
    for _ in range(3):
        await cache.read([])
    assert reader.reads == 3
