"""Pod ends: every link end a pod holds is a veth whose peer is in the node's netns.

The contract with what runs in the pod: its interface `end.intf` is a veth,
made once with the end's MAC, the row's MTU and address, the same GSO limit on
every transport (`TAP_GSO_MAX_SIZE`), up and marked, and
then never deleted, renamed, re-addressed or replaced while it is intact,
whatever carries the link and whatever happens to the link. Its peer, the
node side, is `iface_names.pod_peer_name(namespace, pod, intf)` in the node's netns
(the daemon's), marked too, with no IPv6 address of its own (so it sends
nothing into the pod). Transports attach to the node side (tc.py); the pod
sees carrier exactly while the node side is up, which is how a pulled cable
or an absent far end is shown to it (`set_carrier`).

Each node side says which kind of row holds its pod end now, in its interface
group (`holder_group`). A link that changes kind between a veth and another
kind changes its row's key (a veth row is the pair's, every other kind's is
the end's): the reconciler builds the new row at once and removes the old one
only after the queue's quiet, so the new row takes the end over as it is, and
the old row's removal leaves an end that a row of another kind holds
(`release`). (Had the removal come first, the end would be made again.) A
change of kind under one key (vxlan, grpc, detached) is a move, which keeps
the ends the new row has.

A pod end is intact when the pod side is a veth marked for the link whose
peer is the node side, in the node's netns, and the other way round.
Anything else found under the pod's name with the link's mark (a TAP or a
vxlan device of an older meshwire, one half of a pair) is replaced; an
interface not marked for the link is never touched (`lifecycle.claim`). A
node side whose pod side is elsewhere (its pod restarted in a new netns,
whose old netns the kernel has not torn down yet) is set aside for the new
pair (aside.py): its name is free at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

# The largest GSO packet either side of a pod end takes: no more than a workers' TAP
# takes, so that a pod's TCP segments stitched onto a TAP go through whole. Larger ones
# (a veth's default is 65,536) the kernel would cut to the MTU in software before the
# TAP: a third of the wire's TCP throughput.
from meshwire.dataplane.tap import GSO_MAX_SIZE as TAP_GSO_MAX_SIZE

from ..tables.links import End, LinkKind, LinkRow
from . import iface, rtnl
from .aside import Reaper
from .iface_names import BUILD_GROUP, Mark, NodeRole, node_name, pod_peer_name
from .lifecycle import Target, claim, create_marked
from .netns import Netns, netlink, open_netns

KIND = "veth"
# Interface groups of node sides by their holder's kind ("mwh" + the kind's place);
# iface_names.BUILD_GROUP is another.
HOLDER_BASE = 0x6D776800


@dataclass(frozen=True, slots=True)
class Side:
    """One netns as a driver has it open: the netns and a `Netlink` in it."""

    ns: Netns
    ipr: Any


@dataclass(frozen=True, slots=True)
class PodEnd:
    """A pod end as the kernel has it: its pod side and its node side."""

    pod: iface.Iface
    node: iface.Iface


def node_interfaces(row: LinkRow) -> set[str]:
    """The names of what `row` wants in the node's netns: its pod ends' node sides and
    its transport's device (a vxlan device, a TAP); pruning keeps these."""
    names = {
        pod_peer_name(row.namespace, end.pod, end.intf)
        for end in row.ends()
        if row.kind is not LinkKind.MACVLAN
    }
    if row.kind is LinkKind.VXLAN:
        names.add(node_name(row.key, NodeRole.VXLAN))
    elif row.kind is LinkKind.GRPC:
        names.add(node_name(row.key, NodeRole.TAP))
    return names


def holder_group(kind: LinkKind) -> int:
    """The interface group of a node side whose pod end a row of `kind` holds."""
    return HOLDER_BASE + list(LinkKind).index(kind) + 1


def ensure(
    mark: Mark, end: End, holder: LinkKind, mtu: int, pod: Side, node: Side, reaper: Reaper
) -> PodEnd:
    """Make `end` an intact pod end in `pod`'s netns with its node side in `node`'s, held
    by a row of kind `holder`, and converge the pod side's MTU and address; an
    intact one is kept as it is.

    A new node side starts down: the caller raises it once a transport is
    stitched to it (`set_carrier`).
    """
    name = pod_peer_name(mark.namespace, end.pod, end.intf)
    pod_side = claim(mark, pod.ipr, pod.ns.path, end.intf)
    node_side = claim(mark, node.ipr, node.ns.path, name)
    if pod_side is None or node_side is None or not _paired(pod, pod_side, node, node_side):
        if node_side is not None:
            reaper.set_aside(node.ipr, node.ns, node_side)
        if pod_side is not None:
            iface.delete(pod.ipr, pod_side.index)
        pod_side, node_side = _create(mark, end, mtu, name, pod, node)
    iface.converge(pod.ipr, pod_side, mark, mtu, end.ip)
    group = holder_group(holder)
    if (mtu and node_side.mtu != mtu) or node_side.group != group:
        new_mtu = mtu if node_side.mtu != mtu else 0
        iface.set_link(node.ipr, node_side.index, mtu=new_mtu, group=group)
        node_side = replace(node_side, group=group)
    return PodEnd(pod_side, node_side)


def find_node_side(mark: Mark, end: End, node: Side) -> iface.Iface | None:
    """The node side of `end` if it is there and marked for the link, else None."""
    found = iface.find(node.ipr, pod_peer_name(mark.namespace, end.pod, end.intf))
    if found is None or found.mark != mark or found.kind != KIND:
        return None
    return found


def set_carrier(node: Side, end: PodEnd, on: bool) -> None:
    """Give the pod side carrier (`on`) or take it (its node side up or down); the pod
    side stays admin-up either way. Changes nothing when it already is so."""
    if end.node.up != on:
        iface.set_link(node.ipr, end.node.index, up=on, down=not on)


def give_carrier(host: str, mark: Mark, end: End, holder: LinkKind, on: bool) -> None:
    """`set_carrier` for `end` by name, its node side in the netns at `host`, if a row of
    kind `holder` holds it. An end that is not there (not built yet, its pod gone)
    is left alone: its next build starts without carrier and asks again; so is one
    that a row of another kind holds now (the link left the workers: the wire's
    teardown must not take the new transport's carrier)."""
    with open_netns(host) as ns, netlink(ns) as ipr:
        node = Side(ns, ipr)
        found = find_node_side(mark, end, node)
        if found is not None and found.group == holder_group(holder) and found.up != on:
            iface.set_link(ipr, found.index, up=on, down=not on)


def release(
    mark: Mark, end: End, node: Side, holder: LinkKind, reaper: Reaper | None = None
) -> bool:
    """Delete `end` (both sides) unless a row of another kind than `holder` holds it now
    (the link changed kind, and the new row took the end over). A half-made pair
    (a build cut short) goes too. With a `reaper`, its node side is set aside
    instead (its name free at once; the pod side goes with it later). Whether it
    was released; a gone end is success (True)."""
    found = iface.find(node.ipr, pod_peer_name(mark.namespace, end.pod, end.intf))
    if found is None or (found.mark != mark and not found.half_made):
        return True
    if found.group not in (0, holder_group(holder)) and not found.half_made:
        return False
    if reaper is None:
        iface.delete(node.ipr, found.index)
    else:
        reaper.set_aside(node.ipr, node.ns, found)
    return True


def _create(
    mark: Mark, end: End, mtu: int, name: str, pod: Side, node: Side
) -> tuple[iface.Iface, iface.Iface]:
    create = rtnl.new_veth(
        end.intf,
        name,
        node.ns.fd,
        mtu,
        group=BUILD_GROUP,
        mac=end.mac,
        gso_max_size=TAP_GSO_MAX_SIZE,
    )

    def make() -> None:
        pod.ipr.rtnl.request(create)
        made = iface.find(node.ipr, name)
        if made is not None:
            node.ipr.rtnl.request(rtnl.no_ipv6_addresses(made.index))

    pod_side, node_side = create_marked(
        mark, make, [Target(pod.ns, pod.ipr, end.intf), Target(node.ns, node.ipr, name, up=False)]
    )
    return pod_side, node_side


def _paired(pod: Side, pod_side: iface.Iface, node: Side, node_side: iface.Iface) -> bool:
    """Whether the two are the ends of one veth, each in its own netns."""
    return (
        pod_side.kind == KIND
        and node_side.kind == KIND
        and pod_side.link == node_side.index
        and node_side.link == pod_side.index
        and iface.links_into(pod.ipr, pod_side, pod.ns, node.ns)
        and iface.links_into(node.ipr, node_side, node.ns, pod.ns)
    )
