"""Prometheus series of the gRPC wire, read from the stack at scrape time.

Frame counters are the workers' (their last report, about once a second);
stream refcounts are reported by the workers and checked against what the
manager's ready wires imply (`meshwire_wire_stream_ref_mismatches`, absent
while a report may lag a command).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from meshwire.control.wire.manager import WireManager
from meshwire.control.wire.stack import WireStack
from meshwire.control.wire.supervisor import WorkerPool
from meshwire.dataplane.counters import IMPAIRED


class WireCollector(Collector):
    def __init__(self, stack: WireStack) -> None:
        self.stack = stack

    def collect(self) -> Iterator[Metric]:
        stack = self.stack
        yield from _wires(stack.manager, stack.pool)
        yield from _frames(stack.manager, stack.pool)
        yield from _streams(stack.manager, stack.pool)
        yield from _worker_totals(stack)
        yield from _workers(stack.pool)
        yield from _peer_rpcs(stack)


def _wires(manager: WireManager, pool: WorkerPool) -> Iterator[Metric]:
    """Wire ends by state, and how many the workers hold."""
    wires = GaugeMetricFamily(
        "meshwire_wires", "gRPC wire ends of this node by state.", labels=["state"]
    )
    for state, count in sorted(manager.counts().items()):
        wires.add_metric([state], count)
    yield wires
    yield GaugeMetricFamily(
        "meshwire_wires_in_workers", "Wires the workers hold.", value=pool.held()
    )


def _frames(manager: WireManager, pool: WorkerPool) -> Iterator[Metric]:
    """The workers' frame counters: per impaired link end, and summed over all wires."""
    totals = [0] * 6
    impaired = CounterMetricFamily(
        "meshwire_link_impaired_frames",
        "Frames an end's impairments acted on, per link end (the frames it sends): "
        "dropped (loss), delayed, corrupted, duplicated, reordered, overflow (queue "
        "or rate tail drop).",
        labels=["link", "pod", "intf", "action"],
    )
    for wire_id, counters in pool.counters().items():
        totals = [a + b for a, b in zip(totals, counters.as_list()[:6], strict=True)]
        row = manager.row_of(wire_id)
        if row is None or not row.local.impairments:
            continue
        for name in IMPAIRED:
            labels = [f"{row.namespace}/{row.uid}", row.local.pod, row.local.intf]
            impaired.add_metric([*labels, name.removeprefix("impaired_")], getattr(counters, name))
    yield impaired
    for i, (name, doc) in enumerate(
        [
            ("tx_frames", "Frames read from TAPs and sent to peers."),
            ("tx_bytes", "Bytes read from TAPs and sent to peers."),
            ("tx_drops", "Frames too long for a batch."),
            ("rx_frames", "Frames received from peers and written to TAPs."),
            ("rx_bytes", "Bytes received from peers and written to TAPs."),
            ("rx_drops", "Frames a TAP refused (queue full or down)."),
        ]
    ):
        yield CounterMetricFamily(f"meshwire_wire_{name}", doc, value=totals[i])


def _streams(manager: WireManager, pool: WorkerPool) -> Iterator[Metric]:
    """Outgoing streams: their refcounts, batches, and refcounts that disagree."""
    streams = GaugeMetricFamily(
        "meshwire_wire_stream_refs",
        "Wires using each outgoing stream, as the workers report.",
        labels=["worker", "namespace", "peer"],
    )
    for worker, stream in pool.streams():
        peer = f"{stream.peer_node}:{stream.peer_port}"
        streams.add_metric([str(worker), stream.namespace, peer], stream.refs)
    yield streams
    yield CounterMetricFamily(
        "meshwire_wire_batches",
        "gRPC messages sent on the open streams (frames / batches: the batching).",
        value=sum(stream.batches for _, stream in pool.streams()),
    )
    mismatches = pool.ref_mismatches(manager.expected_refs(pool.index_of))
    if mismatches is not None:
        yield GaugeMetricFamily(
            "meshwire_wire_stream_ref_mismatches",
            "Streams whose reported refcount differs from the ready wires that use them.",
            value=mismatches,
        )


def _worker_totals(stack: WireStack) -> Iterator[Metric]:
    """Totals of no one wire: unknown frames, malformed batches, refusals, incoming
    streams, TAP pairs."""
    pool = stack.pool
    totals_by_kind = pool.totals()
    yield CounterMetricFamily(
        "meshwire_wire_unknown_frames",
        "Frames received for a wire id no worker holds (or of another namespace).",
        value=totals_by_kind.get("unknown", 0),
    )
    yield CounterMetricFamily(
        "meshwire_wire_malformed_batches",
        "Batches dropped whole as malformed.",
        value=totals_by_kind.get("malformed", 0),
    )
    refused = CounterMetricFamily(
        "meshwire_auth_refused",
        "Connections (wire) and calls (peer) refused as unauthenticated, or claiming another node.",
        labels=["service"],
    )
    refused.add_metric(["wire"], totals_by_kind.get("refused", 0))
    refused.add_metric(["peer"], stack.refusals.count)
    yield refused
    yield GaugeMetricFamily(
        "meshwire_wire_incoming_streams",
        "Streams peers send on to this node's workers.",
        value=totals_by_kind.get("incoming", 0),
    )
    yield GaugeMetricFamily(
        "meshwire_wire_tap_pairs",
        "Same-node links under emulation that workers carry TAP to TAP (no stream).",
        value=totals_by_kind.get("pairs", 0),
    )


def _workers(pool: WorkerPool) -> Iterator[Metric]:
    """The worker processes: their pids and restarts."""
    pids = GaugeMetricFamily(
        "meshwire_worker_pid", "Process id of each dataplane worker.", labels=["worker"]
    )
    for worker, pid in sorted(pool.pids().items()):
        pids.add_metric([str(worker)], pid)
    yield pids
    yield CounterMetricFamily(
        "meshwire_worker_restarts", "Dataplane workers restarted.", value=pool.restarts()
    )


def _peer_rpcs(stack: WireStack) -> Iterator[Metric]:
    """The peer RPCs this node made, by method and outcome."""
    calls = CounterMetricFamily(
        "meshwire_peer_rpcs", "Peer RPCs made, by method and outcome.", labels=["method", "ok"]
    )
    for (method, ok), count in sorted(stack.handshaker.calls.items()):
        calls.add_metric([method, str(ok).lower()], count)
    yield calls
