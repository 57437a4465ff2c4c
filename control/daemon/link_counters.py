"""Kernel counters of this node's link ends, for `/links?counters=1`.

`read_counters` reads them fresh, one link dump per pod netns (on a thread
each: `call_in_netns`). An end whose netns or interface does not exist reads
as `{"exists": False}`: a normal answer while a link is built. `CountersCache`
is what the endpoint uses: at most one read per interval, however many
clients poll, and concurrent requests share the read in progress. An end
the last read did not cover (a link built since) has no counters until the
next read.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pyroute2 import IPRoute

from meshwire.base.netns_thread import call_in_netns
from meshwire.control.tables.links import LinkRow

IFF_UP = 0x1
STATS = (
    "rx_packets",
    "tx_packets",
    "rx_bytes",
    "tx_bytes",
    "rx_errors",
    "tx_errors",
    "rx_dropped",
    "tx_dropped",
)
Counters = dict[str, Any]


def _counters(msg: Any) -> Counters:
    stats = msg.get_attr("IFLA_STATS64") or {}
    admin_up = bool(msg["flags"] & IFF_UP)
    out: Counters = {
        "exists": True,
        "admin_up": admin_up,
        # The carrier itself, not the operstate the kernel derives from it a moment later.
        "up": admin_up and msg.get_attr("IFLA_CARRIER") == 1,
    }
    out.update({name: int(stats.get(name, 0)) for name in STATS})
    return out


def _netns_counters(netns: str) -> dict[str, Counters]:
    def read() -> dict[str, Counters]:
        with IPRoute() as ipr:
            return {msg.get_attr("IFLA_IFNAME"): _counters(msg) for msg in ipr.link("dump")}

    try:
        return call_in_netns(netns, read)
    except OSError:
        return {}


def read_counters(rows: Iterable[LinkRow]) -> dict[tuple[str, str], Counters]:
    """(netns, intf) -> counters of every end `rows` realise on this node."""
    wanted: dict[str, set[str]] = {}
    for row in rows:
        for end in row.ends():
            if end.netns:
                wanted.setdefault(end.netns, set()).add(end.intf)
    out: dict[tuple[str, str], Counters] = {}
    for netns, intfs in wanted.items():
        found = _netns_counters(netns)
        for intf in intfs:
            out[(netns, intf)] = found.get(intf, {"exists": False})
    return out


class CountersCache:
    def __init__(
        self,
        interval: float,
        reader: Callable[[Sequence[LinkRow]], dict[tuple[str, str], Counters]] = read_counters,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`reader(rows)` reads the counters (on a thread); at most once per `interval`
        seconds of `clock`."""
        self.interval = interval
        self._reader = reader
        self._clock = clock
        self._lock = asyncio.Lock()
        # The last read and when it began; None before the first.
        self._last: dict[tuple[str, str], Counters] | None = None
        self._at = 0.0

    async def read(self, rows: Sequence[LinkRow]) -> dict[tuple[str, str], Counters]:
        """The counters of `rows`' ends: the last read if it began less than `interval`
        ago, else a new one."""
        async with self._lock:
            now = self._clock()
            if self._last is None or now - self._at >= self.interval:
                self._last = await asyncio.to_thread(self._reader, rows)
                self._at = now
            return self._last
