"""The one retry policy: per-key exponential backoff and the token bucket, as pure values."""

from __future__ import annotations

import pytest

from meshwire.control.common.retries import (
    DEFAULT_BACKOFF_BASE,
    DEFAULT_BACKOFF_CAP,
    ExponentialBackoff,
    TokenBucket,
)


def test_backoff_defaults_are_100ms_doubling_to_one_minute() -> None:
    backoff = ExponentialBackoff()
    delays = [backoff.when("lab/r1") for _ in range(12)]
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 51.2, 60, 60])
    assert (DEFAULT_BACKOFF_BASE, DEFAULT_BACKOFF_CAP) == (0.1, 60.0)


def test_each_call_to_when_counts_one_requeue() -> None:
    backoff = ExponentialBackoff()
    assert backoff.num_requeues("lab/r1") == 0
    backoff.when("lab/r1")
    backoff.when("lab/r1")
    assert backoff.num_requeues("lab/r1") == 2


def test_forget_starts_the_key_over_and_leaves_others_alone() -> None:
    backoff = ExponentialBackoff(base=1.0, cap=100.0)
    for _ in range(3):
        backoff.when("lab/a")
        backoff.when("lab/b")
    backoff.forget("lab/a")
    assert backoff.num_requeues("lab/a") == 0
    assert backoff.when("lab/a") == 1.0
    assert backoff.when("lab/b") == 8.0


def test_forgetting_an_unknown_key_is_not_an_error() -> None:
    ExponentialBackoff().forget("lab/never-failed")


def test_a_key_failing_for_days_stays_at_the_cap() -> None:
    backoff = ExponentialBackoff(base=0.1, cap=60.0)
    for _ in range(5000):
        delay = backoff.when("lab/r1")
    assert delay == 60.0


@pytest.mark.parametrize(
    ("base", "cap", "named"),
    [(0.0, 1.0, "base"), (-1.0, 1.0, "base"), (2.0, 1.0, "cap")],
)
def test_a_nonsensical_backoff_is_rejected_by_name(base: float, cap: float, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        ExponentialBackoff(base=base, cap=cap)


def test_a_full_bucket_lets_a_burst_through_then_spaces_callers_at_the_rate() -> None:
    bucket = TokenBucket(rate=10.0, burst=3, now=0.0)
    waits = [bucket.reserve(now=0.0) for _ in range(5)]
    assert waits == pytest.approx([0.0, 0.0, 0.0, 0.1, 0.2])


def test_the_bucket_refills_at_the_rate_up_to_the_burst() -> None:
    bucket = TokenBucket(rate=10.0, burst=2, now=0.0)
    bucket.reserve(0.0)
    bucket.reserve(0.0)
    assert bucket.reserve(0.05) == pytest.approx(0.05)
    # After a long idle spell only `burst` tokens have accumulated.
    assert [bucket.reserve(100.0) for _ in range(3)] == pytest.approx([0.0, 0.0, 0.1])


def test_the_bucket_ignores_time_going_backwards() -> None:
    bucket = TokenBucket(rate=1.0, burst=1, now=10.0)
    assert bucket.reserve(10.0) == 0.0
    assert bucket.reserve(5.0) == pytest.approx(1.0)


@pytest.mark.parametrize(("rate", "burst", "named"), [(0.0, 1, "rate"), (1.0, 0, "burst")])
def test_a_nonsensical_bucket_is_rejected_by_name(rate: float, burst: int, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        TokenBucket(rate=rate, burst=burst, now=0.0)
