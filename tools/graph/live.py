"""What the live page shows each second, from two snapshots. Pure.

`page_state` is `/state.json`: the drawing's revision (a new one when the
lab's shape changes: a pod, node or link added, moved or taken out; the page
then fetches `/graph.svg` again), and per link its state, kind, error and
each end with its counters and its rates since the previous snapshot
(frames/s and bit/s each way). Counters that went down (an interface made
again) give no rate rather than a negative one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from meshwire.tools.graph.formats import impairment_text
from meshwire.tools.graph.model import Graph, GraphEnd

RATES = {
    "rx_pps": ("rx_packets", 1),
    "tx_pps": ("tx_packets", 1),
    "rx_bps": ("rx_bytes", 8),
    "tx_bps": ("tx_bytes", 8),
}


def page_state(
    graph: Graph, revision: int, now: float, previous: Graph | None, then: float
) -> dict[str, Any]:
    before: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    if previous is not None:
        for link in previous.links:
            for end in (link.a, link.b):
                before[(link.id, end.pod, end.intf)] = end.counters
    links = {}
    for link in graph.links:
        ends = []
        for end in (link.a, link.b):
            old = before.get((link.id, end.pod, end.intf), {})
            ends.append(_end(end, old, now - then))
        links[link.id] = {
            "id": link.id,
            "kind": link.kind,
            "state": link.state,
            "error": link.error,
            "a": ends[0],
            "b": ends[1],
        }
    return {
        "title": graph.title,
        "revision": revision,
        "time": now,
        "pods": [asdict(p) for p in graph.pods],
        "links": links,
    }


def _end(end: GraphEnd, old: Mapping[str, Any], seconds: float) -> dict[str, Any]:
    out = asdict(end)
    out["impairments_text"] = impairment_text(end.impairments)
    rates: dict[str, float] = {}
    if seconds > 0:
        for name, (counter, scale) in RATES.items():
            new, was = end.counters.get(counter), old.get(counter)
            if isinstance(new, int) and isinstance(was, int) and new >= was:
                rates[name] = (new - was) * scale / seconds
    out["rates"] = rates
    return out
