"""The reconcile work queue: keys, not events (the client-go `workqueue` model, on asyncio).

What a caller may rely on:

- Coalescing: a key added any number of times before a consumer takes it is
  handed out once.
- A first change waits for no timer: `add(key)` on a key that is idle (not
  being processed, and its last pass ended at least `debounce` seconds ago, 50
  ms by default, or it never had one) makes it ready at once.
- Debounce only behind a pass: `add(key)` while the key is being processed, or
  within `debounce` of the end of its last pass, makes it ready `debounce`
  seconds after that pass ended. So the changes of a burst (a lab's pods
  starting, a topology applied as one file) that arrive while their key is
  busy coalesce into one more pass: a burst costs about one pass per key, two
  at most. A key that changes without pause gets a pass, then `debounce` of
  quiet, then the next: it cannot be starved, nor hold a consumer for ever.
- `add_after(key, delay)` asks for a pass `delay` seconds from now, no debounce
  added. A key with several requests runs at the earliest of them: a fresh
  `add` overrides a long backoff, because new information deserves a prompt look.
- One consumer at a time: a key handed out by `get()` is not handed out again
  until `done(key)`. A key requested while being processed is kept and becomes
  ready after `done`: at its time, and for an `add`, `debounce` after `done`.
- Retries: `add_rate_limited(key)` requeues with the key's backoff (see
  `retries.py`); `forget(key)` after a success resets it.
- Shutdown: `shutdown()` stops intake at once. Every `get()`, waiting or
  future, returns None, even if keys were pending: a restarted daemon begins
  with a full reconcile, and links outlive the process, so pending passes are
  not lost work. Adds after shutdown are ignored; `done` is still accepted.

All methods are called from the event loop's thread; nothing here locks.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections import OrderedDict

from meshwire.control.common.clock import Clock, MonotonicClock
from meshwire.control.common.config import ReconcileConfig, default
from meshwire.control.common.retries import ExponentialBackoff, RateLimiter

# `reconcile.debounce`: the quiet a key gets after each pass, in which the
# changes that follow it (pods of one lab starting together, a topology applied
# as one file) coalesce into one more pass. A first change never waits for it.
DEFAULT_DEBOUNCE: float = default(ReconcileConfig, "debounce")


class WorkQueue:
    def __init__(
        self,
        clock: Clock | None = None,
        debounce: float = DEFAULT_DEBOUNCE,
        limiter: RateLimiter | None = None,
    ) -> None:
        """Raises ValueError for a negative `debounce`."""
        if debounce < 0:
            raise ValueError(f"queue debounce: must be >= 0 seconds, got {debounce}")
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._debounce = debounce
        self._limiter: RateLimiter = limiter if limiter is not None else ExponentialBackoff()
        # Keys get() may hand out now, oldest first. Every key here is in neither
        # _waiting nor _processing.
        self._ready: OrderedDict[str, None] = OrderedDict()
        # Keys with a pass requested that is not ready yet -> the time it becomes
        # ready (the earliest time requested). Disjoint from _ready. A key here may
        # also be in _processing; it then stays here until done(), even when due,
        # and its time is infinite if only _after_pass asked for it.
        self._waiting: dict[str, float] = {}
        # Keys add()ed while being processed: done() requests them `debounce`
        # after it. Every key here is in _processing and in _waiting.
        self._after_pass: set[str] = set()
        # Keys whose last pass ended less than `debounce` ago -> the time that
        # quiet ends, in increasing order (done() appends; the clock is
        # monotonic). Expired entries are dropped from the front on each add()
        # and done(), so it holds at most the keys done in the last `debounce`.
        self._quiet: OrderedDict[str, float] = OrderedDict()
        # Entries (due, seq, key). An entry is live iff _waiting.get(key) == due;
        # lowering a key's time or promoting it leaves older entries stale, and
        # they are skipped when they reach the top. Every key in _waiting and not
        # in _processing has a live entry.
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        # Keys handed out by get() and not yet done(). Never in _ready.
        self._processing: set[str] = set()
        # One future per get() that is blocked; resolved whenever a key may have
        # become ready sooner than it planned to look.
        self._waiters: list[asyncio.Future[None]] = []
        self._shutting_down = False

    # -- intake ---------------------------------------------------------------

    def add(self, key: str) -> None:
        """Ask for a pass over `key`: at once, or behind its pass and quiet (see above)."""
        if self._shutting_down or key in self._ready:
            return
        now = self._clock.now()
        self._end_quiet(now)
        if key in self._processing:
            self._after_pass.add(key)
            self._waiting.setdefault(key, math.inf)
            return
        self._request(key, self._quiet.get(key, now))

    def add_after(self, key: str, delay: float) -> None:
        """Ask for a pass over `key` in `delay` seconds (zero or less: now), no debounce."""
        if self._shutting_down or key in self._ready:
            return
        self._request(key, self._clock.now() + max(delay, 0.0))

    def _request(self, key: str, due: float) -> None:
        """A pass over `key` (not in _ready) at `due`, unless one is requested sooner."""
        current = self._waiting.get(key)
        if current is not None and current <= due:
            return
        earliest = self._next_due()
        self._waiting[key] = due
        heapq.heappush(self._heap, (due, next(self._seq), key))
        if key not in self._processing and (earliest is None or due < earliest):
            self._wake()

    def add_rate_limited(self, key: str) -> None:
        """Requeue `key` after its backoff; each call counts one more retry."""
        if self._shutting_down:
            return
        self.add_after(key, self._limiter.when(key))

    def forget(self, key: str) -> None:
        """Reset the key's backoff; any pending pass stays.

        Call it when a pass succeeded, and when the key's object is deleted: the
        backoff keeps a counter for every key that failed until it is forgotten.
        """
        self._limiter.forget(key)

    def num_requeues(self, key: str) -> int:
        return self._limiter.num_requeues(key)

    # -- consumption ----------------------------------------------------------

    async def get(self) -> str | None:
        """The next ready key, marked as being processed; None once shut down.

        Waits while no key is ready. Cancelling a waiting get() takes nothing.
        """
        while True:
            if self._shutting_down:
                return None
            self._promote_due()
            if self._ready:
                key, _ = self._ready.popitem(last=False)
                self._processing.add(key)
                return key
            await self._wait(self._next_due())

    def done(self, key: str) -> None:
        """End the pass over `key`; a pass requested meanwhile becomes ready at its time.

        Raises ValueError if `key` is not being processed (a second done(), or a
        key get() never handed out): that is a bug in the caller's loop.
        """
        if key not in self._processing:
            raise ValueError(f"queue: done({key!r}) for a key that is not being processed")
        self._processing.discard(key)
        if self._debounce > 0:
            now = self._clock.now()
            self._end_quiet(now)
            self._quiet[key] = now + self._debounce
            self._quiet.move_to_end(key)
        if key in self._after_pass:
            self._after_pass.discard(key)
            quiet_end = self._quiet.get(key, self._clock.now())
            self._waiting[key] = min(self._waiting[key], quiet_end)
        due = self._waiting.get(key)
        if due is not None:
            heapq.heappush(self._heap, (due, next(self._seq), key))
            self._wake()

    def shutdown(self) -> None:
        """Stop intake and release every waiting get() with None; idempotent."""
        self._shutting_down = True
        self._ready.clear()
        self._waiting.clear()
        self._after_pass.clear()
        self._quiet.clear()
        self._heap.clear()
        self._wake()

    # -- observation ----------------------------------------------------------

    @property
    def depth(self) -> int:
        """Keys with a pass pending (ready or waiting for their time), for metrics."""
        return len(self._ready) + len(self._waiting)

    def __len__(self) -> int:
        return self.depth

    @property
    def debounce(self) -> float:
        """The quiet after each pass, in seconds."""
        return self._debounce

    @property
    def in_flight(self) -> int:
        """Keys handed out by get() and not yet done()."""
        return len(self._processing)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    # -- internals ------------------------------------------------------------

    def _end_quiet(self, now: float) -> None:
        while self._quiet:
            key, until = next(iter(self._quiet.items()))
            if until > now:
                return
            del self._quiet[key]

    def _promote_due(self) -> None:
        now = self._clock.now()
        while self._heap and self._heap[0][0] <= now:
            due, _, key = heapq.heappop(self._heap)
            if self._waiting.get(key) != due or key in self._processing:
                # Stale, or being processed: done() pushes a fresh entry.
                continue
            del self._waiting[key]
            self._ready[key] = None

    def _next_due(self) -> float | None:
        """The time of the earliest live entry, dropping stale entries above it."""
        while self._heap:
            due, _, key = self._heap[0]
            if self._waiting.get(key) == due:
                return due
            heapq.heappop(self._heap)
        return None

    async def _wait(self, due: float | None) -> None:
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(woken)
        timer = None
        if due is not None:
            timer = asyncio.ensure_future(self._clock.sleep(due - self._clock.now()))
        try:
            await asyncio.wait(
                [woken] if timer is None else [woken, timer], return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            if timer is not None:
                timer.cancel()
            if woken in self._waiters:
                self._waiters.remove(woken)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for woken in waiters:
            if not woken.done():
                woken.set_result(None)
