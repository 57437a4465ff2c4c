"""Reconnect backoff for the informer: 800 ms doubling to 30 s, reset after a healthy period.

The numbers are client-go's reflector's: quick enough that a blip costs under a
second, slow enough that a thousand nodes do not hammer an API server that is
down. A connection that stayed healthy for `reset_after` seconds earns a fresh
start, so one failure after a long quiet run waits 800 ms again, not 30 s.

Pure: time comes from an injected clock, so tests take no wall time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    initial: float = 0.8
    maximum: float = 30.0
    # A connection healthy this long resets the delay to `initial`.
    reset_after: float = 120.0


class Backoff:
    """Delays between reconnect attempts.

    Call `healthy()` whenever a request succeeded (a list returned, a watch was
    accepted); call `next_delay()` after each failure and sleep for what it
    returns. Failures with no `healthy()` in between keep doubling; a healthy
    stretch shorter than `reset_after` does not reset the delay.
    """

    def __init__(self, policy: BackoffPolicy | None = None, clock: Clock = time.monotonic) -> None:
        self.policy = policy or BackoffPolicy()
        self._clock = clock
        # Failures since the last reset; the next delay is initial * 2**_failures.
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
        delay = min(self.policy.initial * 2.0**self._failures, self.policy.maximum)
        if delay < self.policy.maximum:
            self._failures += 1
        return delay
