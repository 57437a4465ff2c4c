"""Reconnect backoff: 800 ms doubling to 30 s, reset only after a healthy period."""

from __future__ import annotations

from meshwire.control.common.retries import Backoff, BackoffPolicy
from meshwire.control.informer.informer import RECONNECT


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_consecutive_failures_double_from_800ms_up_to_30s() -> None:
    backoff = Backoff(RECONNECT, clock=FakeClock())
    delays = [backoff.next_delay() for _ in range(9)]
    assert delays == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0]


def test_a_short_healthy_stretch_keeps_the_delay_growing() -> None:
    clock = FakeClock()
    backoff = Backoff(RECONNECT, clock=clock)
    backoff.next_delay()
    backoff.next_delay()
    backoff.healthy()
    clock.now += 119.0
    assert backoff.next_delay() == 3.2


def test_a_connection_healthy_for_the_reset_period_starts_again_at_800ms() -> None:
    clock = FakeClock()
    backoff = Backoff(RECONNECT, clock=clock)
    for _ in range(8):
        backoff.next_delay()
    backoff.healthy()
    clock.now += 120.0
    assert backoff.next_delay() == 0.8
    assert backoff.next_delay() == 1.6


def test_healthy_again_during_a_healthy_stretch_does_not_restart_it() -> None:
    clock = FakeClock()
    backoff = Backoff(RECONNECT, clock=clock)
    backoff.next_delay()
    backoff.healthy()
    clock.now += 100.0
    backoff.healthy()
    clock.now += 20.0
    assert backoff.next_delay() == 0.8


def test_the_policy_is_configurable() -> None:
    backoff = Backoff(BackoffPolicy(initial=0.1, maximum=0.25, reset_after=5.0), FakeClock())
    assert [backoff.next_delay() for _ in range(4)] == [0.1, 0.2, 0.25, 0.25]
