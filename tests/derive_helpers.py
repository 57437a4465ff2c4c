"""Builders for topology scenarios used by the table and derivation tests."""

from __future__ import annotations

from meshwire.control.model.topology import Link, Topology, TopologyStatus

NODE_A = "169.254.0.11"
NODE_B = "169.254.0.12"


def pod(
    name: str,
    *links: Link,
    node: str = "",
    netns: str | None = None,
    namespace: str = "default",
) -> Topology:
    """A pod's Topology; `node` set means the CNI ADD ran there (netns defaults to one)."""
    status = TopologyStatus()
    if node:
        status = TopologyStatus(src_ip=node, net_ns=netns or f"/var/run/netns/{name}")
    return Topology(namespace=namespace, name=name, links=tuple(links), status=status)


def link(uid: int, peer: str, local: str = "eth1", remote: str = "eth1", ip: str = "") -> Link:
    peer_ip = ""
    if ip:
        # ip "10.0.0.1/30" -> the peer gets the next address.
        base, prefix = ip.split("/")
        head, last = base.rsplit(".", 1)
        peer_ip = f"{head}.{int(last) + 1}/{prefix}"
    return Link(
        uid=uid, peer_pod=peer, local_intf=local, peer_intf=remote, local_ip=ip, peer_ip=peer_ip
    )


def pair(uid: int, a: str, b: str, a_intf: str = "eth1", b_intf: str = "eth1") -> tuple[Link, Link]:
    """The two agreeing ends of one link between pods a and b."""
    return (
        Link(uid=uid, peer_pod=b, local_intf=a_intf, peer_intf=b_intf),
        Link(uid=uid, peer_pod=a, local_intf=b_intf, peer_intf=a_intf),
    )
