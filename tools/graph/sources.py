"""Where a picture's content comes from: a lab on this machine, or a cluster.

`snapshot()` returns a fresh `Graph` on each call; it blocks (HTTP, files),
so the live page calls it on a thread.

- `LabSource`: the lab's state file (its nodes and their addresses), the
  Topology objects and their status from the lab's API (inside the hub
  namespace), and every node daemon's `/links?counters=1`. A daemon that does
  not answer leaves its ends `pending`; an API that does not answer leaves
  the topology the lab was built from, placed as the lab placed it.
- `KubeSource`: the Topology objects of one namespace and their status, from
  a cluster through a kubeconfig. Nodes are named by their address (the
  status has `src_ip`, not a node name); no daemon is asked, so a placed
  link is `placed`, an errored one `error`.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from kubernetes import client, config

from meshwire.base import hostport
from meshwire.control.model.topology import GROUP, PLURAL, VERSION
from meshwire.tools.graph.model import Graph, build
from meshwire.tools.lab.lab_names import HUB_IP, LabNames
from meshwire.tools.lab.probe import http_get
from meshwire.tools.lab.state import LabDir, LabState
from meshwire.tools.lab.status import TOPOLOGIES_PATH

# Per request: a snapshot is taken every second.
HTTP_TIMEOUT = 2.0


class Source(Protocol):
    def snapshot(self) -> Graph: ...


class LabSource:
    def __init__(self, lab: LabDir, names: LabNames) -> None:
        self.lab = lab
        self.names = names

    def snapshot(self) -> Graph:
        state = self.lab.load()
        nodes = {node.ip: node.name for node in state.nodes.values()}
        objects = self._topologies(state)
        reports: list[dict[str, Any]] = []
        for node in state.nodes.values():
            reports.extend(self._links(node.metrics, state.token()))
        return build(f"lab {state.name}", objects, nodes, state.inter_node_link_type, reports)

    def _topologies(self, state: LabState) -> list[dict[str, Any]]:
        answer = http_get(
            HUB_IP,
            state.api_port,
            TOPOLOGIES_PATH,
            self.names.hub_netns,
            HTTP_TIMEOUT,
            token=state.token(),
        )
        if answer is not None and answer[0] == 200:
            try:
                items: list[dict[str, Any]] = json.loads(answer[1]).get("items") or []
                return items
            except ValueError:
                pass
        ips = {node.name: node.ip for node in state.nodes.values()}
        out = []
        for obj in state.topologies:
            meta = obj.get("metadata") or {}
            pod = state.pods.get(f"{meta.get('namespace') or 'default'}/{meta.get('name')}")
            src_ip = ips.get(pod.node, "") if pod else ""
            out.append({**obj, "status": {"src_ip": src_ip}})
        return out

    def _links(self, listen: str, token: str) -> list[dict[str, Any]]:
        host, port = hostport.split(listen)
        answer = http_get(
            host, port, "/links?counters=1", self.names.hub_netns, HTTP_TIMEOUT, token=token
        )
        if answer is None or answer[0] != 200:
            return []
        try:
            entries: list[dict[str, Any]] = json.loads(answer[1])
        except ValueError:
            return []
        return entries


class KubeSource:
    def __init__(self, kubeconfig: str | None, namespace: str, inter_node: str) -> None:
        configuration = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
        self.api = client.CustomObjectsApi(client.ApiClient(configuration))
        self.namespace = namespace
        self.inter_node = inter_node

    def snapshot(self) -> Graph:
        answer: Any = self.api.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL)
        objects: list[dict[str, Any]] = answer.get("items") or []
        return build(f"namespace {self.namespace}", objects, {}, self.inter_node)
