"""Builders and views shared by the tests of `meshwire.control.model`."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from meshwire.control.model.topology import Link, Topology
from tests.paths import MESHNET

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).parent.parent
MESHNET_FIXTURES = MESHNET


def link(
    uid: int,
    peer_pod: str,
    local_intf: str = "eth1",
    peer_intf: str = "eth1",
    local_ip: str = "",
    peer_ip: str = "",
) -> Link:
    return Link(
        uid=uid,
        peer_pod=peer_pod,
        local_intf=local_intf,
        peer_intf=peer_intf,
        local_ip=local_ip,
        peer_ip=peer_ip,
    )


def topology(name: str, *links: Link, namespace: str = "lab") -> Topology:
    return Topology(namespace=namespace, name=name, links=links)


def wiring(topologies: Iterable[Topology]) -> set[tuple[str, int, str, str, str, str]]:
    """Every link end as (pod, uid, local_intf, peer_pod, peer_intf, local_ip), namespace aside.

    Two files describe the same lab when their wirings are equal.
    """
    return {
        (t.name, end.uid, end.local_intf, end.peer_pod, end.peer_intf, end.local_ip)
        for t in topologies
        for end in t.links
    }
