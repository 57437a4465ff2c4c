"""Time, injected: the queue, the backoff and the status writer read it only through `Clock`.

`MonotonicClock` is the real one. `FakeClock` stands still until a test calls
`advance`, so a test of a 60 s backoff takes no wall time and cannot race the
machine's load.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale; only differences mean anything."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once `now()` has moved on by `seconds`; zero or less only yields."""
        ...


class MonotonicClock:
    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))


class FakeClock:
    """A clock that moves only when told to.

    `advance` wakes, in deadline order, every sleeper whose deadline it reaches;
    the woken tasks run at the event loop's next turns, not inside `advance`. A
    sleeper that is cancelled leaves no trace.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._seq = itertools.count()
        # (deadline, seq, future). A cancelled future stays until its deadline
        # passes; `sleepers` and `next_deadline` skip it.
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._seq), future))
        await future

    def advance(self, seconds: float) -> None:
        """Move time forward; a negative step is a test bug and raises ValueError."""
        if seconds < 0:
            raise ValueError(f"FakeClock.advance: seconds must be >= 0, got {seconds}")
        self._now += seconds
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)

    @property
    def sleepers(self) -> int:
        """How many tasks are asleep on this clock right now."""
        return sum(1 for _, _, future in self._sleepers if not future.done())

    def next_deadline(self) -> float | None:
        """The earliest deadline a task is asleep until, or None if none is."""
        live = [deadline for deadline, _, future in self._sleepers if not future.done()]
        return min(live, default=None)
