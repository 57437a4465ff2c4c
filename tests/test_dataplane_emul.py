"""The C link emulator (cext/emul.c), driven frame by frame with a fixed seed.

Statistical bounds are 5 standard deviations of the binomial (a false failure
about once in 1.7 million runs for a fresh seed; with the fixed seed the run is
deterministic). Time is simulated: no test waits.
"""

from __future__ import annotations

import math
import struct

import pytest

from meshwire.base.impairments import Params
from meshwire.dataplane.emulator import Emulator

SEED = 20
MS = 1_000_000


def frame(seq: int, size: int = 64) -> bytes:
    return struct.pack("!Q", seq) + bytes(size - 8)


def seq_of(data: bytes) -> int:
    return int(struct.unpack("!Q", data[:8])[0])


def binomial_ok(count: int, n: int, p: float) -> bool:
    sd = math.sqrt(n * p * (1 - p))
    return abs(count - n * p) <= 5 * sd


def emulator(**params: float) -> Emulator:
    e = Emulator(SEED, max_frames=1_000_000, max_bytes=0)
    e.set(Params(**params))
    return e


def drain(e: Emulator, now: int) -> list[bytes]:
    out = []
    while (data := e.pop(now)) is not None:
        out.append(data)
    return out


def test_an_unimpaired_end_passes_every_frame_at_once_in_order() -> None:
    e = emulator()
    for seq in range(1000):
        assert e.push(seq, frame(seq)) == 1
    assert [seq_of(f) for f in drain(e, 1000)] == list(range(1000))
    assert e.counters().passed == 1000


def test_delay_with_jitter_is_uniform_in_delay_plus_minus_jitter() -> None:
    e = emulator(delay_ms=20, jitter_ms=5)
    n = 20_000
    delays = []
    for seq in range(n):
        sent = seq * 100 * MS  # far apart: jitter never has to keep order
        e.push(sent, frame(seq))
        release = e.next_release()
        assert release is not None
        assert e.pop(release - 1) is None
        assert e.pop(release) is not None
        delays.append((release - sent) / MS)
    assert min(delays) >= 15 and max(delays) <= 25
    mean = sum(delays) / n
    # Uniform on [15, 25]: sd 10/sqrt(12), so the mean's sd is 2.89/sqrt(n) = 0.02 ms.
    assert abs(mean - 20) < 0.1
    quarters = [sum(15 + 2.5 * q <= d < 15 + 2.5 * (q + 1) for d in delays) for q in range(4)]
    assert all(binomial_ok(count, n, 0.25) for count in quarters), quarters
    assert e.counters().delayed == n


def test_jitter_never_reorders_frames_sent_close_together() -> None:
    e = emulator(delay_ms=10, jitter_ms=10)
    for seq in range(5000):
        e.push(seq * MS // 10, frame(seq))
    assert [seq_of(f) for f in drain(e, 10**12)] == list(range(5000))


def test_loss_over_100000_frames_is_within_binomial_bounds() -> None:
    e = emulator(loss_pct=20)
    n = 100_000
    passed = sum(e.push(seq, frame(seq)) for seq in range(n))
    dropped = e.counters().dropped
    assert dropped + passed == n
    assert binomial_ok(dropped, n, 0.2), dropped
    assert len(drain(e, n)) == passed


@pytest.mark.parametrize("rate_mbps", [20, 100, 1000])
def test_rate_holds_within_5_percent_under_twice_the_load(rate_mbps: float) -> None:
    e = emulator(rate_mbps=rate_mbps)
    size = 1000
    rate = rate_mbps * 1e6 / 8  # bytes/s
    gap = int(size / (2 * rate) * 1e9)  # offered: twice the rate
    end = 2_000_000_000
    counted_from = 500_000_000  # past the queue's filling
    received = 0
    now = seq = 0
    while now < end:
        e.push(now, frame(seq, size))
        seq += 1
        for data in drain(e, now):
            if now >= counted_from:
                received += len(data)
        now += gap
    measured = received / ((end - counted_from) / 1e9)
    assert abs(measured - rate) / rate < 0.05, (measured, rate)
    # The excess is tail-dropped once the queue holds 100 ms: counted, never delivered.
    assert e.counters().overflow > 0


def test_reorder_sends_frames_at_once_ahead_of_the_delayed_ones() -> None:
    e = emulator(delay_ms=10, reorder_pct=10)
    n = 100_000
    out = []
    for seq in range(n):
        now = seq * MS
        e.push(now, frame(seq))
        out.extend(seq_of(f) for f in drain(e, now))
    out.extend(seq_of(f) for f in drain(e, 10**15))
    reordered = e.counters().reordered
    assert binomial_ok(reordered, n, 0.1), reordered
    assert sorted(out) == list(range(n))
    # A reordered frame arrives before the frames sent up to 10 ms before it.
    overtakers = sum(1 for i in range(1, n) if out[i] < out[i - 1])
    assert overtakers <= reordered and overtakers > 0.9 * reordered


def test_duplicates_arrive_right_after_their_original_in_binomial_numbers() -> None:
    e = emulator(duplicate_pct=5)
    n = 100_000
    queued = sum(e.push(seq, frame(seq)) for seq in range(n))
    duplicated = e.counters().duplicated
    assert queued == n + duplicated
    assert binomial_ok(duplicated, n, 0.05), duplicated
    out = [seq_of(f) for f in drain(e, n)]
    twice = [s for i, s in enumerate(out[1:]) if s == out[i]]
    assert len(twice) == duplicated and len(set(out)) == n


def test_corruption_flips_one_bit_past_the_header_in_binomial_numbers() -> None:
    e = emulator(corrupt_pct=1)
    n = 100_000
    head = b"\xff" * 10  # the TAP's virtio-net header: never corrupted
    for seq in range(n):
        e.push(seq, head + frame(seq), skip=len(head))
    bad = 0
    for seq, data in enumerate(drain(e, n)):  # no delay: the order is kept
        sent = head + frame(seq)
        if data != sent:
            bad += 1
            flipped = int.from_bytes(data, "big") ^ int.from_bytes(sent, "big")
            assert bin(flipped).count("1") == 1
            assert data[: len(head)] == head
    assert bad == e.counters().corrupted
    assert binomial_ok(bad, n, 0.01), bad


def test_the_same_seed_decides_the_same() -> None:
    runs = []
    for _ in range(2):
        e = emulator(loss_pct=30, duplicate_pct=10, reorder_pct=10, delay_ms=1)
        for seq in range(2000):
            e.push(seq * MS, frame(seq))
        runs.append([seq_of(f) for f in drain(e, 10**15)])
    assert runs[0] == runs[1]


def test_changed_parameters_apply_to_the_next_frame_and_keep_the_queue() -> None:
    e = emulator(delay_ms=50)
    e.push(0, frame(1))
    e.set(Params(delay_ms=0))
    e.push(1, frame(2))
    assert [seq_of(f) for f in drain(e, 1)] == []  # jitter-free order: 2 waits behind 1
    assert [seq_of(f) for f in drain(e, 50 * MS)] == [1, 2]


def test_a_full_queue_drops_and_counts() -> None:
    e = Emulator(SEED, max_frames=10, max_bytes=0)
    e.set(Params(delay_ms=1))
    assert sum(e.push(0, frame(seq)) for seq in range(15)) == 10
    assert e.counters().overflow == 5
