"""containerlab topology files (`*.clab.yml`) to Topology objects.

Read: `name`, `topology.nodes` (a mapping of node name to node) and
`topology.links`, in both containerlab forms:

- brief: `- endpoints: ["r1:eth1", "r2:eth1"]`; `"macvlan:eth0"` as one
  endpoint is a macvlan on the host interface `eth0` (`peer_pod: localhost`);
- extended: `- type: veth` with `endpoints: [{node: r1, interface: eth1}, ...]`,
  and `- type: macvlan` with `endpoint: {node: r1, interface: eth1}` and
  `host-interface: eth0`; a link's `mtu` becomes the link's `mtu`.

What the nodes run (`cmd`, `exec`, `binds`, `env`) is read by `podspec.py`,
which also reports every other node field (images, vendor kinds) as not run.
The lab's `name` is the namespace unless the caller gives one. Links to the
host network namespace (`host:`, `mgmt-net:`, `type: host`), to bridge nodes
and other link types have no meshnet equivalent and are an error naming the
link. uids and the split into one Topology per node: see `labfile.py`.
"""

from __future__ import annotations

from typing import Any

from meshwire.control.model.labfile import (
    LabLink,
    Origin,
    Path,
    check_node_name,
    lab_namespace,
    lab_topologies,
)
from meshwire.control.model.topology import LOCALHOST, Topology

# Endpoint "nodes" of the brief form that are not pods.
MACVLAN = "macvlan"
_HOST_SIDE = ("host", "mgmt-net", "bridge", "ovs-bridge")
_BRIDGE_KINDS = ("bridge", "ovs-bridge")
_UNSUPPORTED = "meshwire links pods to pods, or a pod to a host interface with macvlan"


def looks_like_containerlab(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("topology"), dict)


def containerlab_topologies(
    data: dict[str, Any], origin: Origin, namespace: str | None
) -> list[Topology]:
    """The Topology objects of a containerlab file; raises LoadError naming the place."""
    namespace = lab_namespace(data.get("name"), namespace, origin)
    topology = data["topology"]
    raw_nodes = topology.get("nodes") or {}
    if not isinstance(raw_nodes, dict):
        raise origin.error(("topology", "nodes"), "expected a mapping of node name to node")
    bridges: set[str] = set()
    for name, node in raw_nodes.items():
        check_node_name(name, origin, ("topology", "nodes", name))
        if isinstance(node, dict) and node.get("kind") in _BRIDGE_KINDS:
            bridges.add(name)
    raw_links = topology.get("links") or []
    if not isinstance(raw_links, list):
        raise origin.error(("topology", "links"), "expected a list of links")
    links = [
        _link(raw, ("topology", "links", index), bridges, origin)
        for index, raw in enumerate(raw_links)
    ]
    pods = [name for name in raw_nodes if name not in bridges]
    return lab_topologies(links, pods, namespace, origin)


def _link(raw: Any, path: Path, bridges: set[str], origin: Origin) -> LabLink:
    if not isinstance(raw, dict):
        raise origin.error(path, f"expected a mapping with endpoints, got {raw!r}")
    kind = raw.get("type", "veth")
    ends: list[tuple[str, str, Path]]
    if kind == MACVLAN:
        node, intf = _endpoint(raw.get("endpoint"), (*path, "endpoint"), origin)
        host_intf = raw.get("host-interface")
        if not isinstance(host_intf, str) or not host_intf:
            raise origin.error((*path, "host-interface"), "required for a macvlan link")
        ends = [(node, intf, (*path, "endpoint")), (LOCALHOST, host_intf, path)]
    elif kind == "veth":
        endpoints = raw.get("endpoints")
        if not isinstance(endpoints, list) or len(endpoints) != 2:
            raise origin.error((*path, "endpoints"), f"expected two endpoints, got {endpoints!r}")
        ends = []
        for index, endpoint in enumerate(endpoints):
            where = (*path, "endpoints", index)
            ends.append((*_endpoint(endpoint, where, origin), where))
    else:
        raise origin.error((*path, "type"), f"link type {kind!r} is not supported: {_UNSUPPORTED}")
    for node, _, where in ends:
        if node in _HOST_SIDE or node in bridges:
            raise origin.error(where, f"a link to {node!r} is not supported: {_UNSUPPORTED}")
    if ends[0][0] == LOCALHOST:
        ends.reverse()
    if ends[0][0] == LOCALHOST:
        raise origin.error((*path, "endpoints"), "both endpoints are host interfaces")
    (a_node, a_intf, _), (z_node, z_intf, _) = ends
    mtu = raw.get("mtu", 0)
    if isinstance(mtu, bool) or not isinstance(mtu, int):
        raise origin.error((*path, "mtu"), f"expected an integer, got {mtu!r}")
    return LabLink(a_node, a_intf, z_node, z_intf, path, mtu)


def _endpoint(raw: Any, path: Path, origin: Origin) -> tuple[str, str]:
    """(node, interface); a brief `macvlan:eth0` gives (`localhost`, `eth0`)."""
    if isinstance(raw, dict):
        node, intf = raw.get("node"), raw.get("interface")
        if not isinstance(node, str) or not node:
            raise origin.error((*path, "node"), "required")
        if not isinstance(intf, str) or not intf:
            raise origin.error((*path, "interface"), "required")
        return node, intf
    if not isinstance(raw, str):
        raise origin.error(path, f'endpoint {raw!r} must be "node:interface"')
    node, colon, intf = raw.partition(":")
    if not colon or not node or not intf:
        raise origin.error(path, f'endpoint "{raw}" must be "node:interface"')
    return (LOCALHOST if node == MACVLAN else node), intf
