"""The lab's view of its links: one per (namespace, uid), both ends, and the kind it should be.

Each link appears in the Topology of both its pods; here it is one `LabLink`,
its `a` end the pod that comes first in the file. The kind follows from the
placement as the daemons derive it (DESIGN.md §4): both pods on one node is a
veth, `peer_pod: localhost` a macvlan, otherwise the configured inter-node
kind. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from meshwire.control.model.topology import Topology


@dataclass(frozen=True, slots=True)
class LabEnd:
    pod: str  # ns/name, or "localhost" for the host end of a macvlan
    intf: str
    ip: str  # CIDR or ""

    @property
    def address(self) -> str:
        """The bare address (no prefix length), "" when the end has none."""
        return self.ip.split("/", 1)[0]


@dataclass(frozen=True, slots=True)
class LabLink:
    namespace: str
    uid: int
    kind: str
    a: LabEnd
    b: LabEnd

    @property
    def name(self) -> str:
        return f"{self.a.pod}:{self.a.intf} -- {self.b.pod}:{self.b.intf}"


def lab_links(
    topologies: list[Topology], placement: dict[str, str], inter_node: str
) -> list[LabLink]:
    """Every link once, in file order; a link only one side declares is still listed."""
    seen: dict[tuple[str, int], LabLink] = {}
    for topology in topologies:
        for link in topology.links:
            key = (topology.namespace, link.uid)
            if key in seen:
                continue
            a = LabEnd(topology.key, link.local_intf, link.local_ip)
            if link.to_host:
                b, kind = LabEnd("localhost", link.peer_intf, ""), "macvlan"
            else:
                b = LabEnd(f"{topology.namespace}/{link.peer_pod}", link.peer_intf, link.peer_ip)
                same = placement.get(a.pod) == placement.get(b.pod)
                kind = "veth" if same else inter_node
            seen[key] = LabLink(topology.namespace, link.uid, kind, a, b)
    return list(seen.values())


def topologies_of(raw: list[dict[str, Any]]) -> list[Topology]:
    return [Topology.from_dict(obj) for obj in raw]
