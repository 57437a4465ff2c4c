"""Prometheus metrics of the daemon, read from its live state at scrape time.

Counters and histograms are updated as things happen (reconcile durations and
errors); everything that is a level (queue depth, links by kind and status,
informer state) is computed when scraped, so it can never drift from the
tables it describes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client import Counter as PromCounter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from meshwire.control.informer.stats import InformerStats
from meshwire.control.tables.health import Health
from meshwire.control.tables.links import LinkRow


@dataclass(frozen=True, slots=True)
class StateView:
    """Callables the collector reads at scrape time."""

    queue_depth: Callable[[], int]
    # Every link row with its health.
    links: Callable[[], list[tuple[LinkRow, Health]]]
    topologies: Callable[[], int]
    informer_counts: Callable[[], dict[str, int]]
    synced: Callable[[], bool]
    initial_done: Callable[[], bool]


class StateCollector(Collector):
    def __init__(self, view: StateView) -> None:
        self.view = view

    def collect(self) -> Iterator[Metric]:
        view = self.view
        yield GaugeMetricFamily(
            "meshwire_queue_depth", "Keys waiting in the reconcile queue.", value=view.queue_depth()
        )
        yield GaugeMetricFamily(
            "meshwire_topologies", "Topology objects in the table.", value=view.topologies()
        )
        by_kind_state: Counter[tuple[str, str]] = Counter()
        for row, status in view.links():
            by_kind_state[(row.kind.value, status.state.value)] += 1
        links = GaugeMetricFamily(
            "meshwire_links", "Link rows of this node by kind and status.", labels=["kind", "state"]
        )
        for (kind, state), count in sorted(by_kind_state.items()):
            links.add_metric([kind, state], count)
        yield links
        events = CounterMetricFamily(
            "meshwire_informer",
            "Informer activity (events by type, relists, reconnects).",
            labels=["what"],
        )
        for what, count in sorted(view.informer_counts().items()):
            events.add_metric([what], count)
        yield events
        yield GaugeMetricFamily(
            "meshwire_synced", "1 once the informer's first list is applied.", value=view.synced()
        )
        yield GaugeMetricFamily(
            "meshwire_initial_reconcile_done",
            "1 once every link that existed at sync has been attempted.",
            value=view.initial_done(),
        )


class Metrics:
    """The registry, with the event-driven series; `attach` adds the state collector."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.reconcile_seconds = Histogram(
            "meshwire_reconcile_duration_seconds",
            "Time to realise or delete one link.",
            ["op"],
            registry=self.registry,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.reconcile_errors = PromCounter(
            "meshwire_reconcile_errors", "Failed link operations.", ["op"], registry=self.registry
        )
        self.pruned = PromCounter(
            "meshwire_pruned_interfaces", "Marked interfaces no row wanted.", registry=self.registry
        )
        self.full_passes = PromCounter(
            "meshwire_full_passes",
            "Full passes begun: every link queued for a check against the kernel "
            "(reconcile.full_interval).",
            registry=self.registry,
        )

        self.netns_refused = PromCounter(
            "meshwire_netns_refused",
            "Link actions refused because a status named a netns no CNI ADD on this node "
            "handed the daemon (action: build, clear).",
            ["action"],
            registry=self.registry,
        )

    def attach(self, view: StateView) -> None:
        self.registry.register(StateCollector(view))

    def observe_reconcile(self, op: str, seconds: float, ok: bool) -> None:
        self.reconcile_seconds.labels(op).observe(seconds)
        if not ok:
            self.reconcile_errors.labels(op).inc()


def informer_counts(stats: InformerStats) -> dict[str, int]:
    counts = {f"event_{kind.lower()}": n for kind, n in stats.events.items()}
    counts.update(lists=stats.lists, relists=stats.relists, reconnects=stats.reconnects)
    return counts
