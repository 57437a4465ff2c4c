"""Rows of the `links` table: the link ends this node must realise.

A row is desired state only, derived by a pure function from the topologies
table (`reconcile/derive.py`); it holds everything a link driver needs and
nothing it has to look up. Realised state is read back from the kernel by the
drivers, never cached here.

Keys: a veth joins two pods of this node and is one row, `ns/uid`; every other
kind is one end on this node, `ns/uid/pod`. So when a pod moves between nodes
the key changes with the kind: the old row is deleted (its driver tears the old
link down) and the new one inserted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from meshwire.control.model.emulation import Impairments
from meshwire.control.tables.table import Table


class LinkKind(StrEnum):
    VETH = "veth"
    VXLAN = "vxlan"
    GRPC = "grpc"
    MACVLAN = "macvlan"


@dataclass(frozen=True, slots=True)
class End:
    """One end of a link: an interface `intf` in the network namespace `netns`.

    `netns` is a path (`/var/run/netns/x`, `/proc/<pid>/ns/net`); it is empty
    for an end on another node. `ip` is a CIDR (`10.0.0.1/24`, `2001:db8::1/64`)
    or empty for an interface without an address. `mac` is the MAC the
    interface is made with (`model/macs.py`), lower case; "" for a host
    interface (a macvlan's lower device), which meshwire does not make.
    `impairments` are those of the frames this end sends (model/emulation.py).
    """

    pod: str
    netns: str
    intf: str
    ip: str = ""
    mac: str = ""
    impairments: Impairments = field(default_factory=Impairments)


@dataclass(frozen=True, slots=True)
class LinkRow:
    namespace: str
    uid: int
    kind: LinkKind
    local: End
    # veth: the other pod of this node. vxlan/grpc: the pod on the peer node.
    # macvlan: pod "localhost", intf the host interface to attach to.
    peer: End
    mtu: int
    # vxlan and grpc: the underlay address of the node the peer pod runs on.
    peer_node_ip: str = ""
    # vxlan: the VNI, the same on both nodes.
    vni: int = 0
    # grpc: this end's wire id, stable for (namespace, uid, local pod).
    wire_id: int = 0
    # vxlan and grpc: why the link has no id (its namespace got no slot); the
    # driver reports it as the link's error and builds nothing. "" normally.
    id_problem: str = ""
    # The cable is pulled (`state: down` on either end): both ends without carrier,
    # no frame passes. Only a grpc row (the workers' path) can be pulled.
    down: bool = False
    # A grpc row only because the link is under emulation (impairments or a `state` on
    # either end): without it, a veth or vxlan. Turning it on or off rebuilds the link.
    emulated: bool = False

    @property
    def key(self) -> str:
        if self.kind is LinkKind.VETH:
            return f"{self.namespace}/{self.uid}"
        return f"{self.namespace}/{self.uid}/{self.local.pod}"

    def ends(self) -> tuple[End, ...]:
        """The ends this node realises: both for a veth, the local one otherwise."""
        if self.kind is LinkKind.VETH:
            return (self.local, self.peer)
        return (self.local,)


POD_INDEX = "pod"


def pods_of(row: LinkRow) -> Iterable[str]:
    """The local pods (`ns/pod`) a row touches."""
    return {f"{row.namespace}/{end.pod}" for end in row.ends()}


def new_links_table() -> Table[LinkRow]:
    """The links table, indexed by the local pods (`ns/pod`) each row touches."""
    return Table("links", indexes={POD_INDEX: pods_of})
