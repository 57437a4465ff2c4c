"""The lab's view of its links: one per (namespace, uid), both ends, and the kind it should be.

Each link appears in the Topology of both its pods; here it is one `LabLink`,
its `a` end the pod that comes first in the file. The kind follows from the
placement as the daemons derive it (docs/design.md §4): a link under emulation
(impairments or a `state` on either end) is grpc, both pods on one node is a
veth, `peer_pod: localhost` a macvlan, otherwise the configured inter-node
kind. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from meshwire.control.model.emulation import Impairments
from meshwire.control.model.topology import Topology


@dataclass(frozen=True, slots=True)
class LabEnd:
    pod: str  # ns/name, or "localhost" for the host end of a macvlan
    intf: str
    ip: str  # CIDR or ""
    # What its Topology sets for the frames this end sends, and its `state` ("" unset).
    impairments: Impairments = field(default_factory=Impairments)
    state: str = ""

    @property
    def address(self) -> str:
        """The bare address (no prefix length), "" when the end has none."""
        return self.ip.split("/", 1)[0]


@dataclass(frozen=True, slots=True)
class LabLink:
    namespace: str
    uid: int
    kind: str  # veth | vxlan | grpc | macvlan | none (unwired)
    a: LabEnd
    b: LabEnd
    a_node: str = ""  # the node of the `a` pod: for a macvlan, the node whose eth0 it is on
    # Why no CNI plugin wires this link ("" if one does): its peer pod has no Topology.
    unwired: str = ""

    @property
    def name(self) -> str:
        return f"{self.a.pod}:{self.a.intf} -- {self.b.pod}:{self.b.intf}"


def lab_links(
    topologies: list[Topology], placement: dict[str, str], inter_node: str
) -> list[LabLink]:
    """Every link once, in file order; a link only one side declares is still listed.

    A link whose peer pod has no Topology in the file is `unwired`: the daemons
    (like meshnet) build no link to a pod that is not part of a topology, so
    it has kind `none` and the reason (meshnet's 2node.yml has one: r3 to r4).
    """
    seen: dict[tuple[str, int], LabLink] = {}
    by_key = {topology.key: topology for topology in topologies}
    pods = set(by_key)
    for topology in topologies:
        for link in topology.links:
            key = (topology.namespace, link.uid)
            if key in seen:
                continue
            a = LabEnd(topology.key, link.local_intf, link.local_ip, link.impairments, link.state)
            node = placement.get(a.pod, "")
            unwired = ""
            if link.to_host:
                b, kind = LabEnd("localhost", link.peer_intf, ""), "macvlan"
            else:
                peer_key = f"{topology.namespace}/{link.peer_pod}"
                peer = by_key[peer_key].link(link.uid) if peer_key in by_key else None
                b = LabEnd(
                    peer_key,
                    link.peer_intf,
                    link.peer_ip,
                    peer.impairments if peer is not None else Impairments(),
                    peer.state if peer is not None else "",
                )
                kind = "veth" if node == placement.get(b.pod) else inter_node
                if link.emulated or (peer is not None and peer.emulated):
                    kind = "grpc"
                if b.pod not in pods:
                    kind = "none"
                    unwired = f"peer pod {b.pod} has no Topology, so no CNI plugin wires this link"
            seen[key] = LabLink(topology.namespace, link.uid, kind, a, b, node, unwired)
    return list(seen.values())


def topologies_of(raw: list[dict[str, Any]]) -> list[Topology]:
    return [Topology.from_dict(obj) for obj in raw]
