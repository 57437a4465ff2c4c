"""The one retry policy: exponential backoff, per key or for one sequence of
attempts, and the token bucket that caps a rate.

A `BackoffPolicy` says how delays grow: `initial * 2**n` for the n-th retry,
capped at `maximum`, and back to `initial` after a healthy stretch of
`reset_after` seconds. `ExponentialBackoff` applies it per key (the work
queue's rows, the status writer's pods); `Backoff` applies it to one sequence
(the informer's reconnects, a worker's restarts, the id slot keeper's retries).

All are pure: they hold counters, never sleep, and read time only from an
injected clock, so they are tested without wall time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from meshwire.control.common.config import ReconcileConfig, default

# `reconcile.backoff_min` doubling to `backoff_max`: a transient failure
# (a peer pod not yet up, an API hiccup) is retried before anyone notices, and a
# key that keeps failing costs one attempt a minute, which the 60 s full
# reconcile would do anyway.
DEFAULT_BACKOFF_BASE: float = default(ReconcileConfig, "backoff_min")
DEFAULT_BACKOFF_CAP: float = default(ReconcileConfig, "backoff_max")


# What a backoff reads the time with: a function of no arguments giving seconds on a
# monotonic scale (`time.monotonic`, or a test's fake). Not `clock.Clock`, which
# also sleeps: a backoff only measures.
Now = Callable[[], float]


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """`initial * 2**n` seconds for the n-th retry (from 0), capped at `maximum`; a
    sequence healthy for `reset_after` seconds starts from `initial` again.
    Raises ValueError for an initial delay that is not positive or a cap below it."""

    initial: float = DEFAULT_BACKOFF_BASE
    maximum: float = DEFAULT_BACKOFF_CAP
    reset_after: float = math.inf

    def __post_init__(self) -> None:
        if self.initial <= 0:
            raise ValueError(f"backoff base: must be > 0 seconds, got {self.initial}")
        if self.maximum < self.initial:
            raise ValueError(f"backoff cap: must be >= base ({self.initial} s), got {self.maximum}")

    def delay(self, n: int) -> float:
        # Past 2**1023 a float overflows; any n that far out is at the cap anyway.
        if n >= 1023:
            return self.maximum
        return min(self.initial * 2.0**n, self.maximum)


class Backoff:
    """Delays between the attempts of one sequence (a connection, a process, a poll).

    Call `healthy()` whenever an attempt succeeded (a list returned, a worker
    started serving); call `next_delay()` after each failure and sleep for what
    it returns. Failures with no `healthy()` in between keep doubling; a healthy
    stretch shorter than the policy's `reset_after` does not reset the delay.
    """

    def __init__(self, policy: BackoffPolicy | None = None, clock: Now = time.monotonic) -> None:
        self.policy = policy or BackoffPolicy()
        self._clock = clock
        # Failures since the last reset; the next delay is policy.delay(_failures).
        self._failures = 0
        # When the current healthy stretch began; None while failing.
        self._healthy_since: float | None = None

    def healthy(self) -> None:
        if self._healthy_since is None:
            self._healthy_since = self._clock()

    def next_delay(self) -> float:
        since = self._healthy_since
        if since is not None and self._clock() - since >= self.policy.reset_after:
            self._failures = 0
        self._healthy_since = None
        delay = self.policy.delay(self._failures)
        if delay < self.policy.maximum:
            self._failures += 1
        return delay


class RateLimiter(Protocol):
    """Per-key retry delays, in the client-go `TypedRateLimiter` shape."""

    def when(self, key: str) -> float:
        """The delay before the key's next retry, in seconds; counts the retry."""
        ...

    def forget(self, key: str) -> None:
        """Stop tracking the key (it succeeded): its next failure starts from the base."""
        ...

    def num_requeues(self, key: str) -> int:
        """How many retries `when` has counted since the key was last forgotten."""
        ...


class ExponentialBackoff:
    """A `BackoffPolicy` per key: `base * 2**n` seconds for the key's n-th retry
    (from 0), capped at `cap`, until the key is forgotten.

    No jitter: delays are per key and keys fail at different moments, and a
    deterministic delay is what the tests and the operator's logs can check.
    Raises ValueError for a base that is not positive or a cap below the base.
    """

    def __init__(
        self, base: float = DEFAULT_BACKOFF_BASE, cap: float = DEFAULT_BACKOFF_CAP
    ) -> None:
        self.policy = BackoffPolicy(base, cap)
        self.base = base
        self.cap = cap
        # key -> retries counted since the key was last forgotten; a key absent
        # here has never failed or has been forgotten.
        self._failures: dict[str, int] = {}

    def when(self, key: str) -> float:
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        return self.policy.delay(n)

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    def num_requeues(self, key: str) -> int:
        return self._failures.get(key, 0)


class TokenBucket:
    """At most `burst` events at once and `rate` per second on average.

    `reserve(now)` takes a token and returns how long the caller must wait
    before acting on it (0.0 if a token was there). Reservations queue up: the
    tenth caller in a row after an empty bucket is told to wait ten tokens'
    worth, so concurrent callers that each wait their answer stay within rate.
    `now` must not go backwards. Raises ValueError for a rate or burst that is
    not positive.
    """

    def __init__(self, rate: float, burst: int, now: float) -> None:
        if rate <= 0:
            raise ValueError(f"rate: must be > 0 per second, got {rate}")
        if burst < 1:
            raise ValueError(f"burst: must be >= 1, got {burst}")
        self.rate = rate
        self.burst = burst
        # Tokens available at `_stamp`; negative when reservations ran ahead of
        # the refill. Invariant: _tokens <= burst.
        self._tokens = float(burst)
        self._stamp = now

    def reserve(self, now: float) -> float:
        elapsed = max(now - self._stamp, 0.0)
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.rate)
        self._stamp = max(now, self._stamp)
        self._tokens -= 1.0
        if self._tokens >= 0:
            return 0.0
        return -self._tokens / self.rate
