"""Desired links of a pod, derived from the topologies table: a pure function.

Same topologies in, same rows out, on every node. A pod is local when its
Topology `status.src_ip` is this node's address and `status.net_ns` is set
(the CNI ADD recorded it). For each valid link of a local pod:

- peer `localhost`: a macvlan row on the host interface `peer_intf`;
- peer not running (no Topology, or no `src_ip`/`net_ns`: not started yet,
  deleted, restarting; or its `src_ip` is a node the cluster says was removed,
  daemon/node_watch.py): a `detached` row, the pod's end
  alone without carrier; the link is built when the peer's change re-derives
  this pod (it is a dependent);
- peer on this node: one veth row for the pair, the same whichever of the two
  pods is derived (no "lazy half");
- peer on another node: a grpc row while both nodes carry their links on grpc,
  else a vxlan row (`inter_node_kind`), with ids from the namespace's slot
  (`ids.py`). A namespace without a slot yet gets no such row, and the pod is
  listed as waiting for it (a CNI ADD waits too: the link is due, unlike one
  whose peer is not running; a change of slots re-derives it); one that cannot
  get a slot gets the row with `id_problem` set, which the driver reports
  instead of building anything.

Each row's MTU is the link's own `mtu` (given on either end) or the daemon's.
A link under emulation (model/emulation.py: impairments or a `state` on
either end) is a grpc row whichever nodes its pods run on: the workers carry
it, through a gRPC stream to the far node's worker, or TAP to TAP inside one
worker for two pods of one node (wire/manager.py joins those two rows itself);
every other link stays on the kernel's path (veth, vxlan). Each end carries
its own impairments; the row is `down` if either end's state is.
Each pod end's MAC is its link's `local_mac` or derived (`model/macs.py`): the
same on every node, so the same after a restart or a move.
Links that fail validation, or whose two ends disagree, get no row and a
problem naming the object, link and field; the pod's other links still work.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from meshwire.control.common.config import Config, VxlanConfig, default
from meshwire.control.common.ids import IdError, Slot, vni, wire_id
from meshwire.control.model.macs import end_mac
from meshwire.control.model.topology import Topology
from meshwire.control.model.validate import check_pair, link_mtu, validate_topology
from meshwire.control.tables.links import End, LinkKind, LinkRow
from meshwire.control.tables.topologies import TopologyTable


@dataclass(frozen=True, slots=True)
class NodeView:
    """What derivation needs to know about this node and its daemon's config."""

    node_ip: str
    inter_node_link_type: Literal["vxlan", "grpc"] = default(Config, "inter_node_link_type")
    mtu: int = default(Config, "mtu")
    vni_base: int = default(VxlanConfig, "vni_base")


class SlotSource(Protocol):
    def slot_of(self, namespace: str) -> Slot | str | None:
        """The namespace's slot; a message when it cannot have one (exhausted);
        None while it has none yet."""
        ...


@dataclass(slots=True)
class Derived:
    """Rows for the derived pods, keyed by row key, problems per pod key, and the pods
    with a link that waits for its namespace's id slot."""

    rows: dict[str, LinkRow] = field(default_factory=dict)
    problems: dict[str, list[str]] = field(default_factory=dict)
    waiting_for_slot: set[str] = field(default_factory=set)


class NoSlot(enum.Enum):
    """A link's row is due, but its namespace has no id slot yet."""

    NO_SLOT = "no slot"


NO_SLOT = NoSlot.NO_SLOT


def is_local(topology: Topology, node: NodeView) -> bool:
    return topology.status.src_ip == node.node_ip and bool(topology.status.net_ns)


def _running(topology: Topology | None) -> bool:
    return topology is not None and bool(topology.status.src_ip) and bool(topology.status.net_ns)


class Cluster(Protocol):
    """What the cluster says of its nodes, by address (daemon/node_watch.py)."""

    def gone(self, ip: str) -> bool:
        """Whether the node of that address was removed from the cluster."""
        ...

    def link_type(self, ip: str) -> str | None:
        """The link type ("vxlan", "grpc") the node of that address carries its
        cross-node links on; None if it does not say."""
        ...


class NoCluster:
    """Nothing followed (a lab's API has no Nodes): no node is gone, none says anything."""

    def gone(self, ip: str) -> bool:
        return False

    def link_type(self, ip: str) -> str | None:
        return None


NO_CLUSTER = NoCluster()


def inter_node_kind(node: NodeView, cluster: Cluster, peer_ip: str) -> LinkKind:
    """The kind of a link without emulation to a pod on the node of `peer_ip`: grpc
    while both nodes carry their links on grpc, else vxlan. Each node's is what the
    cluster says of it, else this daemon's `inter_node_link_type`; so both ends reach
    the same answer from the same Node objects, and a rolling change of the setting
    moves each link once, when its second node's says grpc (or its first's no
    longer does), not twice with a stretch of mismatched ends between."""
    own = cluster.link_type(node.node_ip) or node.inter_node_link_type
    peer = cluster.link_type(peer_ip) or own
    return LinkKind.GRPC if own == peer == "grpc" else LinkKind.VXLAN


def derive_pods(
    table: TopologyTable,
    pod_keys: set[str],
    node: NodeView,
    slots: SlotSource,
    cluster: Cluster = NO_CLUSTER,
) -> Derived:
    """Rows and problems of every local pod among `pod_keys` (others yield nothing)."""
    out = Derived()
    for key in sorted(pod_keys):
        topology = table.get(key)
        if topology is None or not is_local(topology, node):
            continue
        problems = out.problems.setdefault(key, [])
        validated = validate_topology(topology)
        problems.extend(str(p) for p in validated.problems)
        for link in validated.links:
            row = _row(table, topology, link.uid, node, slots, problems, cluster)
            if isinstance(row, LinkRow):
                out.rows[row.key] = row
            elif row is NO_SLOT:
                out.waiting_for_slot.add(key)
        if not problems:
            del out.problems[key]
    return out


def _row(
    table: TopologyTable,
    topology: Topology,
    uid: int,
    node: NodeView,
    slots: SlotSource,
    problems: list[str],
    cluster: Cluster,
) -> LinkRow | NoSlot | None:
    """The link's row; NO_SLOT when it is due but its namespace has no id slot yet;
    None when there is none to build (a problem)."""
    link = topology.link(uid)
    assert link is not None  # validate_topology only returns links of this topology
    ns = topology.namespace
    mac = end_mac(ns, topology.name, link)
    local = End(
        topology.name,
        topology.status.net_ns,
        link.local_intf,
        link.local_ip,
        mac,
        link.impairments,
    )

    peer_topology = None if link.to_host else table.get(f"{ns}/{link.peer_pod}")
    mtu = link_mtu(link, peer_topology, node.mtu)
    if link.to_host:
        return LinkRow(
            ns, uid, LinkKind.MACVLAN, local, End(link.peer_pod, "", link.peer_intf), mtu
        )
    problem = check_pair(topology, link, peer_topology)
    if problem is not None:
        problems.append(str(problem))
        return None
    if (
        peer_topology is None
        or not _running(peer_topology)
        or cluster.gone(peer_topology.status.src_ip)
    ):
        # The pod keeps its interface, without carrier, until its far end runs.
        far = End(link.peer_pod, "", link.peer_intf, link.peer_ip)
        return LinkRow(ns, uid, LinkKind.DETACHED, local, far, mtu)
    peer_status = peer_topology.status
    peer_link = peer_topology.link(uid)
    assert peer_link is not None  # check_pair found it
    peer_mac = end_mac(ns, peer_topology.name, peer_link)
    emulated = link.emulated or peer_link.emulated
    if peer_status.src_ip == node.node_ip and not emulated:
        net_ns = peer_status.net_ns
        peer = End(peer_topology.name, net_ns, link.peer_intf, link.peer_ip, peer_mac)
        first, second = sorted((local, peer), key=lambda end: (end.pod, end.intf))
        return LinkRow(ns, uid, LinkKind.VETH, first, second, mtu)
    remote = End(
        peer_topology.name, "", link.peer_intf, link.peer_ip, peer_mac, peer_link.impairments
    )
    kind = LinkKind.GRPC if emulated else inter_node_kind(node, cluster, peer_status.src_ip)
    # A pulled cable is a `state`, so emulated: `down` is only ever set on a grpc row.
    down = link.down or peer_link.down
    row = LinkRow(
        ns, uid, kind, local, remote, mtu, peer_status.src_ip, down=down, emulated=emulated
    )
    return _with_id(row, topology, peer_topology.name, node, slots, problems)


def _with_id(
    row: LinkRow,
    topology: Topology,
    peer_pod: str,
    node: NodeView,
    slots: SlotSource,
    problems: list[str],
) -> LinkRow | NoSlot | None:
    """A node-to-node `row` (vxlan or grpc) with the id its namespace's slot gives it: a
    VNI or a wire id. NO_SLOT while the namespace has no slot yet; the row with
    `id_problem` when it can get none; None, with a problem, for a uid no id fits."""
    slot = slots.slot_of(row.namespace)
    if slot is None:
        return NO_SLOT
    if isinstance(slot, str):
        return replace(row, id_problem=slot)
    try:
        if row.kind is LinkKind.VXLAN:
            return replace(row, vni=vni(slot, row.uid, node.vni_base))
        return replace(row, wire_id=wire_id(slot, row.uid, topology.name, peer_pod))
    except IdError as exc:
        problems.append(f"topology {topology.key}: link uid {row.uid}: uid: {exc}")
        return None
