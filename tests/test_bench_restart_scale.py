"""The restart-at-scale benchmark's own parts: how it reads the API's request counts and
the daemon's informer counters, and the status its remote pods' restarts write."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
NODE_IP = "169.254.0.11"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """restart_scale_bench, imported as the scripts import each other."""
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("restart_scale_bench")


def row(source: str, verb: str, resource: str, count: int) -> dict[str, object]:
    return {"source": source, "verb": verb, "resource": resource, "count": count}


def test_only_the_daemons_requests_made_between_the_two_looks_are_counted(
    bench: ModuleType,
) -> None:
    before = [
        row(NODE_IP, "list", "topologies", 1),
        row(NODE_IP, "watch", "topologies", 1),
        row(NODE_IP, "patch", "topologies/status", 3),
        row("169.254.0.1", "patch", "topologies/status", 5),
    ]
    after = [
        row(NODE_IP, "list", "topologies", 1),
        row(NODE_IP, "watch", "topologies", 1),
        row(NODE_IP, "patch", "topologies/status", 83),
        row(NODE_IP, "get", "topologies", 2),
        row("169.254.0.1", "patch", "topologies/status", 900),
    ]
    assert bench.requests_between(before, after, NODE_IP) == {
        "get topologies": 2,
        "patch topologies/status": 80,
    }
    assert bench.requests_between(after, after, NODE_IP) == {}


def test_the_informer_counters_are_read_from_the_daemons_metrics(bench: ModuleType) -> None:
    metrics = "\n".join(
        [
            "# HELP meshwire_informer_total Informer activity (events by type, relists, ...).",
            "# TYPE meshwire_informer_total counter",
            'meshwire_informer_total{what="event_added"} 10003.0',
            'meshwire_informer_total{what="event_modified"} 1.234e+03',
            'meshwire_informer_total{what="lists"} 1.0',
            'meshwire_links{kind="veth",state="up"} 3.0',
        ]
    )
    assert bench.informer_counts(metrics) == {
        "event_added": 10003,
        "event_modified": 1234,
        "lists": 1,
    }


def test_each_remote_restart_writes_a_sandbox_of_its_own(bench: ModuleType) -> None:
    written = [bench.remote_restart_status(index, n) for n in range(3) for index in (0, 7)]
    assert len({s["container_id"] for s in written}) == len(written)
    assert len({s["net_ns"] for s in written}) == len(written)
    assert all(len(s["container_id"]) == 64 for s in written)


def test_gets_pass_only_when_bounded_by_cni_calls_that_remote_events_outnumber(
    bench: ModuleType,
) -> None:
    assert bench.no_get_per_remote_event(gets=40, cni_calls=83, remote_events=300)
    assert not bench.no_get_per_remote_event(gets=300, cni_calls=83, remote_events=300)
    # Too few remote events to tell a GET per event from a GET per CNI call.
    assert not bench.no_get_per_remote_event(gets=40, cni_calls=83, remote_events=50)
