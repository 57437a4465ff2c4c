"""`meshwire lab status`: every pod with its node and netns, every link with its state and counters.

Sources: the state file (pods, nodes, processes), the API's Topology status
(`src_ip`, `plumbing_error`, `link_rebuilds`; read from inside the hub namespace, where the API
is), and the kernel (each link end's existence, carrier, MAC and frame counters).
An unreachable API is reported, not fatal: the kernel view still stands.

Each end shows its impairments (those of the frames it sends) and its cable
(`cable down` while pulled), as the API's Topology objects say.

Link state: `up` (both ends exist and are up), `down` (an end is down),
`missing` (an end does not exist), `error` (a pod's status has a plumbing
error, which is shown), `unwired` (the peer pod has no Topology: nothing
wires the link).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from meshwire.control.model.topology import API_VERSION, PLURAL
from meshwire.tools.client.text_table import table
from meshwire.tools.lab import processes, software
from meshwire.tools.lab.check import end_netns, pod_ends
from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.kernel import Ends
from meshwire.tools.lab.lab_names import HUB_IP, LabNames, netns_path
from meshwire.tools.lab.links import LabEnd, lab_links, topologies_of
from meshwire.tools.lab.probe import http_get
from meshwire.tools.lab.state import LabState

TOPOLOGIES_PATH = f"/apis/{API_VERSION}/{PLURAL}"


def api_items(state: LabState, names: LabNames) -> list[dict[str, Any]] | None:
    """The Topology objects in the embedded API; None when it does not answer, or for a
    lab on a Kubernetes API server (`lab up --kubeconfig`)."""
    if state.kube_server:
        return None
    answer = http_get(
        HUB_IP, state.api_port, TOPOLOGIES_PATH, netns=names.hub_netns, token=state.token()
    )
    if answer is None or answer[0] != 200:
        return None
    try:
        items = json.loads(answer[1]).get("items") or []
    except ValueError:
        return None
    return [item for item in items if isinstance(item, dict)]


def api_statuses(state: LabState, names: LabNames) -> dict[str, dict[str, Any]] | None:
    """`ns/name` -> the Topology's status from the API; None when the API does not answer."""
    if state.kube_server:
        return _kube_statuses(state)
    items = api_items(state, names)
    return None if items is None else _statuses(items)


def in_file_order(
    from_file: list[dict[str, Any]], items: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """The lab file's objects, each replaced by the API's object of the same key where the
    API has one (so edits since `up` show), in the file's order."""

    def key(obj: dict[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"

    current = {key(item): item for item in items or []}
    return [current.get(key(obj), obj) for obj in from_file]


def _statuses(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        meta = item.get("metadata") or {}
        out[f"{meta.get('namespace', 'default')}/{meta.get('name')}"] = item.get("status") or {}
    return out


def _kube_statuses(state: LabState) -> dict[str, dict[str, Any]] | None:
    """The statuses from the API server of `lab up --kubeconfig`, as its kubeconfig reaches it."""
    from meshwire.tools.lab.kube import KubeLab  # the Kubernetes client: only this lab kind

    try:
        kube = KubeLab(Path(state.kubeconfig))
    except LabError:
        return None
    try:
        return kube.statuses(state.topology_keys())
    finally:
        kube.close()


def gather(state: LabState, names: LabNames) -> dict[str, Any]:
    """The whole status as plain data (what `--json` prints)."""
    items = api_items(state, names)
    if state.kube_server:
        statuses = api_statuses(state, names)
    else:
        statuses = None if items is None else _statuses(items)
    nodes = []
    for node in state.nodes.values():
        daemon = state.process(f"daemon/{node.name}")
        nodes.append(
            {
                "node": node.name,
                "ip": node.ip,
                "netns": netns_path(node.netns),
                "daemon_pid": daemon.pid if daemon else None,
                "daemon_running": bool(daemon and processes.is_running(daemon)),
            }
        )
    pods = []
    for pod in state.pods.values():
        status = (statuses or {}).get(pod.key, {})
        pods.append(
            {
                "pod": pod.key,
                "node": pod.node,
                "netns": netns_path(pod.netns),
                "container_id": pod.container_id,
                "src_ip": status.get("src_ip", ""),
                "plumbing_error": status.get("plumbing_error", ""),
                "link_rebuilds": status.get("link_rebuilds", ""),
                "processes": software.process_states(state, pod),
            }
        )
    errors = {p["pod"]: p["plumbing_error"] for p in pods if p["plumbing_error"]}
    placement = {key: pod.node for key, pod in state.pods.items()}
    links = []
    # The API's objects carry what was edited since `up` (impairments, cable state).
    objects = topologies_of(in_file_order(state.topologies, items))
    all_links = lab_links(objects, placement, state.inter_node_link_type)
    kernel = Ends(end_netns(names, end) for link in all_links for end in pod_ends(link))
    for link in all_links:
        ends = [_end(names, kernel, link.a), _end(names, kernel, link.b)]
        pod_errors = [errors.get(link.a.pod), errors.get(link.b.pod)]
        links.append(
            {
                "link": f"{link.namespace}/{link.uid}",
                "kind": link.kind,
                "state": "unwired" if link.unwired else _link_state(ends, pod_errors),
                "a": ends[0],
                "b": ends[1],
            }
        )
    return {
        "lab": state.name,
        "directory": state.directory,
        "api": {
            "url": state.api_url,
            "host_url": state.host_url,
            "reachable": statuses is not None,
        },
        "nodes": nodes,
        "pods": pods,
        "links": links,
    }


def _end(names: LabNames, kernel: Ends, end: LabEnd) -> dict[str, Any]:
    out: dict[str, Any] = {
        "pod": end.pod,
        "intf": end.intf,
        "ip": end.ip,
        "impairments": end.impairments.to_dict(),
        "cable": end.state or "up",
    }
    if end.pod == "localhost":
        return out
    out.update(asdict(kernel.get(end_netns(names, end), end.intf)))
    return out


def _link_state(ends: list[dict[str, Any]], errors: list[str | None]) -> str:
    shown = [e for e in errors if e]
    if shown:
        return f"error: {shown[0]}"
    pods = [e for e in ends if e["pod"] != "localhost"]
    if not all(e["exists"] for e in pods):
        return "missing"
    return "up" if all(e["up"] for e in pods) else "down"


def render(status: dict[str, Any]) -> str:
    api = status["api"]
    where = api["host_url"] or f"{api['url']} (hub netns)"
    nodes = [
        (
            n["node"],
            n["ip"],
            n["daemon_pid"] or "-",
            "running" if n["daemon_running"] else "stopped",
        )
        for n in status["nodes"]
    ]
    pods = [
        (p["pod"], p["node"], p["netns"], p["src_ip"] or "-", _processes_text(p["processes"]))
        for p in status["pods"]
    ]
    links = [
        (k["link"], k["kind"], k["state"], _end_text(k["a"]), _end_text(k["b"]))
        for k in status["links"]
    ]
    return "\n\n".join(
        [
            f"lab {status['lab']}: API {where} "
            + ("reachable" if api["reachable"] else "UNREACHABLE"),
            table("nodes", ("node", "ip", "daemon pid", "daemon"), nodes),
            table("pods", ("pod", "node", "netns", "src_ip", "processes"), pods),
            table("links", ("link", "kind", "state", "a (mac rx/tx)", "b (mac rx/tx)"), links),
        ]
    )


def _processes_text(states: dict[str, str]) -> str:
    """`pod running, cmd exited`: the pod's holder and its cmd."""
    return ", ".join(f"{what} {state}" for what, state in states.items()) or "-"


def _end_text(end: dict[str, Any]) -> str:
    text = f"{end['pod']}:{end['intf']}"
    if "rx_packets" in end and end["exists"]:
        text += f" {end['mac']} {end['rx_packets']}/{end['tx_packets']}"
    if end.get("impairments"):
        text += " [" + " ".join(f"{k}={v:g}" for k, v in end["impairments"].items()) + "]"
    if end.get("cable") == "down":
        text += " [cable down]"
    return text
