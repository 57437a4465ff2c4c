"""One picture's content: simulated (or real) nodes, the pods on them, the links between.

`build` is pure: the same Topology objects, placement and `/links` entries
give the same `Graph`. Its inputs and what each adds:

- Topology objects (as the API returns them): the pods and links. A link is
  listed once, its `a` end the pod that comes first (`lab_links`); a link's
  kind follows from the placement as the daemons derive it.
- `status.src_ip` of each Topology: the pod's node (`nodes` maps node
  addresses to names; an address with no name is its own name). A pod with
  no `src_ip` is on no node yet: it is drawn outside every node group.
- `status.plumbing_error`: the pod's error, shown on its links.
- the daemons' `/links?counters=1` entries (optional): each end's reconcile
  state, last error, MAC and kernel counters.
- per link entry, the optional `state: up|down` (a pulled cable) and
  `impairments` mapping of link emulation, read as they are, shown on the end
  that carries them.

A link's `state`, the worst that applies:
`unwired` (its peer pod has no Topology: nothing wires it), `error` (a
pod's `plumbing_error` or an end's reconcile error), `pulled` (the topology
pulls its cable), `unplaced` (a pod has no node yet), `pending` (an end's
daemon has not built it yet), `down` (an end exists without carrier or is
missing), `up` (every end built and carrying), `placed` (both pods placed, no
daemon's view: what `meshwire graph` on a cluster sees).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from meshwire.control.model.topology import Topology
from meshwire.tools.lab.links import lab_links

STATES = ("up", "placed", "pending", "down", "unplaced", "pulled", "error", "unwired")
# Where a pod without a node is drawn.
NO_NODE = ""


@dataclass(frozen=True, slots=True)
class GraphEnd:
    pod: str  # ns/name, or "localhost" for a macvlan's host end
    intf: str
    ip: str = ""
    mac: str = ""
    # The daemon's reconcile state of this end (done | pending | error), "" when unknown.
    reconcile: str = ""
    error: str = ""
    # Kernel counters of the interface (rx_packets, tx_bytes, rx_errors, ...), {} when unknown;
    # `exists` and `up` (admin up with carrier) among them when known.
    counters: Mapping[str, Any] = field(default_factory=dict)
    impairments: Mapping[str, Any] = field(default_factory=dict)
    pulled: bool = False


@dataclass(frozen=True, slots=True)
class GraphLink:
    id: str  # ns/uid
    kind: str
    state: str
    a: GraphEnd
    b: GraphEnd
    error: str = ""


@dataclass(frozen=True, slots=True)
class GraphPod:
    id: str  # ns/name
    node: str  # node name, NO_NODE when unplaced
    error: str = ""


@dataclass(frozen=True, slots=True)
class Graph:
    title: str
    nodes: tuple[str, ...]
    pods: tuple[GraphPod, ...]
    links: tuple[GraphLink, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def shape(self) -> tuple[Any, ...]:
        """What the layout depends on (not states, not counters): a new shape, a new drawing."""
        return (
            self.nodes,
            tuple((p.id, p.node) for p in self.pods),
            tuple(
                (k.id, k.kind, k.a.pod, k.a.intf, k.a.ip, k.b.pod, k.b.intf, k.b.ip)
                for k in self.links
            ),
        )


def build(
    title: str,
    objects: Iterable[Mapping[str, Any]],
    nodes: Mapping[str, str],
    inter_node: str,
    reports: Iterable[Mapping[str, Any]] | None = None,
) -> Graph:
    """The graph of Topology `objects`; `nodes` maps node address -> name; `reports`
    are `/links` entries (None: no daemon was asked, states are `placed`)."""
    raw = [dict(obj) for obj in objects]
    topologies = [Topology.from_dict(obj) for obj in raw]
    placement: dict[str, str] = {}
    errors: dict[str, str] = {}
    for topology in topologies:
        ip = topology.status.src_ip
        placement[topology.key] = nodes.get(ip, ip) if ip else NO_NODE
        if topology.status.plumbing_error:
            errors[topology.key] = topology.status.plumbing_error
    extras = _link_extras(raw)
    ends = _report_ends(reports or [])
    links = []
    for link in lab_links(topologies, placement, inter_node):
        link_id = f"{link.namespace}/{link.uid}"
        graph_ends = []
        for end in (link.a, link.b):
            seen = ends.get((link_id, end.pod, end.intf), {})
            extra = extras.get((end.pod, link.uid), {})
            graph_ends.append(
                GraphEnd(
                    pod=end.pod,
                    intf=end.intf,
                    ip=end.ip,
                    mac=str(seen.get("mac", "")),
                    reconcile=str(seen.get("state", "")),
                    error=str(seen.get("error", "")),
                    counters=dict(seen.get("counters") or {}),
                    impairments=dict(extra.get("impairments") or {}),
                    pulled=extra.get("state") == "down",
                )
            )
        a, b = graph_ends
        error = link.unwired or errors.get(a.pod) or errors.get(b.pod) or a.error or b.error
        pods_placed = all(placement.get(e.pod) for e in (a, b) if e.pod != "localhost")
        state = _state(link.unwired, error, a, b, pods_placed, reports is not None)
        links.append(GraphLink(link_id, link.kind, state, a, b, error))
    pods = tuple(GraphPod(t.key, placement[t.key], errors.get(t.key, "")) for t in topologies)
    node_names = sorted({*nodes.values(), *(p.node for p in pods if p.node)})
    return Graph(title, tuple(node_names), pods, tuple(links))


def _state(unwired: str, error: str, a: GraphEnd, b: GraphEnd, placed: bool, daemons: bool) -> str:
    if unwired:
        return "unwired"
    if error:
        return "error"
    if a.pulled or b.pulled:
        return "pulled"
    if not placed:
        return "unplaced"
    if not daemons:
        return "placed"
    realised = [e for e in (a, b) if e.pod != "localhost"]
    if any(e.reconcile != "done" for e in realised):
        return "pending"
    if any(not e.counters.get("up", False) for e in realised):
        return "down"
    return "up"


def _link_extras(raw: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """(ns/pod, uid) -> the link entry as written, for fields the model does not read."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for obj in raw:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
        for entry in (obj.get("spec") or {}).get("links") or []:
            if isinstance(entry, dict) and isinstance(entry.get("uid"), int):
                out[(key, entry["uid"])] = entry
    return out


def _report_ends(
    reports: Iterable[Mapping[str, Any]],
) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(link, pod, intf) -> what the daemon realising that end reports of it.

    A veth's one entry covers both its ends (its `peer` carries counters too);
    a cross-node link's entries come one from each node, each for its `local`.
    """
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for entry in reports:
        common = {"state": entry.get("state", ""), "error": entry.get("error", "")}
        for side in ("local", "peer"):
            end = entry.get(side) or {}
            if side == "peer" and entry.get("kind") != "veth":
                continue
            key = (str(entry.get("link")), str(end.get("pod")), str(end.get("intf")))
            out[key] = {**common, "mac": end.get("mac", ""), "counters": end.get("counters")}
    return out
