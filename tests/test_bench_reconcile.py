"""The reconcile benchmark's own parts: the kernel floor it measures against, and
how it reads the daemon's split of a restart."""

from __future__ import annotations

import importlib
import ipaddress
import secrets
from pathlib import Path
from types import ModuleType

import pytest

from meshwire.control.daemon.cni_handler import ADD_TIMINGS
from meshwire.tools.lab import netns

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, ModuleType]:
    """(kernel_floor, reconcile_bench), imported as the scripts import each other."""
    monkeypatch.syspath_prepend(str(BENCH))
    floor = importlib.import_module("kernel_floor")
    reconcile = importlib.import_module("reconcile_bench")
    return floor, reconcile


def test_the_floor_script_makes_every_pair_with_both_ends_addressed_and_up(
    bench: tuple[ModuleType, ModuleType],
) -> None:
    floor, _ = bench
    first, second = floor.batches(3, "peer")
    assert first.splitlines() == [
        "link add fa0 type veth peer name fb0 netns peer",
        "address add 10.64.0.1/30 dev fa0",
        "link set fa0 up",
        "link add fa1 type veth peer name fb1 netns peer",
        "address add 10.64.0.5/30 dev fa1",
        "link set fa1 up",
        "link add fa2 type veth peer name fb2 netns peer",
        "address add 10.64.0.9/30 dev fa2",
        "link set fa2 up",
    ]
    assert second.splitlines() == [
        "address add 10.64.0.2/30 dev fb0",
        "link set fb0 up",
        "address add 10.64.0.6/30 dev fb1",
        "link set fb1 up",
        "address add 10.64.0.10/30 dev fb2",
        "link set fb2 up",
    ]


def test_the_floor_gives_each_of_its_largest_count_of_pairs_a_subnet_of_its_own(
    bench: tuple[ModuleType, ModuleType],
) -> None:
    floor, _ = bench
    networks = set()
    for index in range(floor.MAX_PAIRS):
        a, b = (ipaddress.ip_interface(cidr) for cidr in floor.addresses(index))
        assert a.network == b.network and a.ip != b.ip
        networks.add(a.network)
    assert len(networks) == floor.MAX_PAIRS
    with pytest.raises(ValueError):
        floor.batches(floor.MAX_PAIRS + 1, "peer")
    with pytest.raises(ValueError):
        floor.batches(0, "peer")


@pytest.mark.root
def test_the_floor_is_measured_in_namespaces_of_its_own_that_it_removes(
    bench: tuple[ModuleType, ModuleType],
) -> None:
    floor, _ = bench
    prefix = f"mwft{secrets.token_hex(3)}-"
    try:
        returned, up = floor.measure(4, prefix)
        assert 0 < returned <= up
        assert netns.names_with_prefix(prefix) == []
    finally:
        for name in netns.names_with_prefix(prefix):
            netns.delete(name)


def test_the_bench_reads_the_last_add_split_of_its_pod_from_text_or_json_logs(
    bench: tuple[ModuleType, ModuleType],
) -> None:
    _, reconcile = bench
    first = ADD_TIMINGS % ("default/r3", 1.0, 2.0, 3.0, 4.0, 10.0)
    last = ADD_TIMINGS % ("default/r3", 0.5, 1.25, 0.25, 0.0, 2.0)
    other = ADD_TIMINGS % ("default/r30", 9.0, 9.0, 9.0, 9.0, 36.0)
    text = "\n".join(
        [
            f"2026-01-01 INFO {first}",
            f'{{"ts": "x", "level": "info", "msg": "{last}"}}',
            f"2026-01-01 INFO {other}",
        ]
    )
    assert reconcile.parse_add_timings(text, "default/r3") == {
        "queue_ms": 0.5,
        "netlink_ms": 1.25,
        "noticed_ms": 0.25,
        "status_ms": 0.0,
        "daemon_ms": 2.0,
    }
    assert reconcile.parse_add_timings("nothing here", "default/r3") is None


def test_percentiles_are_in_milliseconds(bench: tuple[ModuleType, ModuleType]) -> None:
    _, reconcile = bench
    assert reconcile.percentiles([0.001 * ms for ms in range(1, 101)]) == {
        "p50": 50.5,
        "p99": 99.0,
        "max": 100.0,
    }
