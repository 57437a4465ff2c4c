"""`meshwire lab impair` and `meshwire lab link`: link emulation as edits of the Topology.

Each command reads the pod's Topology from the API, changes the link entry
whose `local_intf` is the interface (its `impairments` or `state`), and writes
it back with its resourceVersion (a conflicting write is read and retried), so
the change is declarative: every daemon follows it from its watch, and it
survives daemon restarts. An entry for the interface in the
`meshwire.dev/emulation` annotation would override the spec, so an edit drops
it (the annotation is for clusters whose CRD prunes the fields; the lab's API
keeps them). The edited object is checked as the daemons will check it, so a
value out of range is refused here, naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from meshwire.control.model.emulation import ANNOTATION, Impairments
from meshwire.control.model.topology import API_VERSION, PLURAL, ModelError, Topology
from meshwire.control.model.validate import validate_topology
from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.lab_names import HUB_IP, LabNames
from meshwire.tools.lab.probe import http_request
from meshwire.tools.lab.state import LabState

ATTEMPTS = 5

# Command-line flag -> Impairments field.
FLAGS = {
    "delay": "delay_ms",
    "jitter": "jitter_ms",
    "loss": "loss_pct",
    "corrupt": "corrupt_pct",
    "duplicate": "duplicate_pct",
    "reorder": "reorder_pct",
    "rate": "rate_mbps",
}


def split_end(text: str) -> tuple[str, str]:
    pod, colon, intf = text.rpartition(":")
    if not colon or not pod or not intf:
        raise LabError(f"{text!r}: expected POD:INTF (e.g. r1:eth1)")
    return pod, intf


def _path(namespace: str, name: str) -> str:
    return f"/apis/{API_VERSION}/namespaces/{namespace}/{PLURAL}/{name}"


def _request(
    state: LabState, names: LabNames, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    if state.kube_server:
        raise LabError(
            f"lab {state.name} runs on a Kubernetes API server: edit its Topology there "
            f"(kubectl edit, or the {ANNOTATION} annotation where the CRD prunes the fields)"
        )
    data = b"" if body is None else json.dumps(body).encode()
    answer = http_request(
        method,
        HUB_IP,
        state.api_port,
        path,
        data,
        netns=names.hub_netns,
        timeout=10.0,
        token=state.token(),
    )
    if answer is None:
        raise LabError(f"lab {state.name}: the API does not answer")
    try:
        return answer[0], json.loads(answer[1]) if answer[1] else None
    except ValueError:
        return answer[0], answer[1]


def _find(obj: dict[str, Any], intf: str, where: str) -> dict[str, Any]:
    for link in (obj.get("spec") or {}).get("links") or []:
        if isinstance(link, dict) and link.get("local_intf") == intf:
            return link
    raise LabError(f"{where}: no link has local_intf {intf!r}")


def read_end(state: LabState, names: LabNames, end: str) -> tuple[str, Topology, int]:
    """The pod key, its Topology as the daemons read it, and the link's index."""
    pod_name, intf = split_end(end)
    pod = state.pod(pod_name)
    status, obj = _request(state, names, "GET", _path(pod.namespace, pod.name))
    if status != 200:
        raise LabError(f"topology {pod.key}: the API answered {status}: {obj}")
    topology = Topology.from_dict(obj)
    for index, link in enumerate(topology.links):
        if link.local_intf == intf:
            return pod.key, topology, index
    raise LabError(f"topology {pod.key}: no link has local_intf {intf!r}")


def edit_end(
    state: LabState, names: LabNames, end: str, edit: Callable[[dict[str, Any]], None]
) -> Topology:
    """Applies `edit` to the link entry of `end` (POD:INTF) and writes the object back;
    returns it as the daemons will read it. Raises LabError naming what failed."""
    pod_name, intf = split_end(end)
    pod = state.pod(pod_name)
    path = _path(pod.namespace, pod.name)
    for _ in range(ATTEMPTS):
        status, obj = _request(state, names, "GET", path)
        if status != 200:
            raise LabError(f"topology {pod.key}: the API answered {status}: {obj}")
        edit(_find(obj, intf, f"topology {pod.key}"))
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if ANNOTATION in annotations:
            entries = json.loads(annotations[ANNOTATION])
            entries.pop(intf, None)
            annotations[ANNOTATION] = json.dumps(entries)
        try:
            topology = Topology.from_dict(obj)
        except ModelError as exc:
            raise LabError(str(exc)) from None
        problems = [p for p in validate_topology(topology).problems if p.field != "uid"]
        mine = [str(p) for p in problems if _intf_of(topology, p.index) == intf]
        if mine:
            raise LabError("; ".join(mine))
        status, answer = _request(state, names, "PUT", path, obj)
        if status == 200:
            return Topology.from_dict(answer)
        if status != 409:
            raise LabError(f"topology {pod.key}: the API refused the edit ({status}): {answer}")
    raise LabError(f"topology {pod.key}: {ATTEMPTS} conflicting writes in a row; try again")


def _intf_of(topology: Topology, index: int) -> str:
    return topology.links[index].local_intf if index < len(topology.links) else ""


def impair(
    state: LabState, names: LabNames, end: str, changes: dict[str, float], clear: bool
) -> str:
    """Sets (`changes`, merged over what is set), clears, or with neither shows."""
    if not changes and not clear:
        _, topology, index = read_end(state, names, end)
        return describe(end, topology.links[index].impairments, topology.links[index].state)

    def edit(link: dict[str, Any]) -> None:
        current = Impairments.from_dict(link.get("impairments"))
        wanted = Impairments() if clear else current.replace(**changes)
        if wanted:
            link["impairments"] = wanted.to_dict()
        else:
            link.pop("impairments", None)

    topology = edit_end(state, names, end, edit)
    _, intf = split_end(end)
    link = next(link for link in topology.links if link.local_intf == intf)
    return describe(end, link.impairments, link.state)


def set_state(state: LabState, names: LabNames, end: str, wanted: str) -> str:
    def edit(link: dict[str, Any]) -> None:
        link["state"] = wanted

    edit_end(state, names, end, edit)
    return f"{end}: cable {'pulled (down)' if wanted == 'down' else 'plugged (up)'}"


def describe(end: str, impairments: Impairments, state: str) -> str:
    parts = [f"{name}={value:g}" for name, value in impairments.to_dict().items()]
    text = f"{end}: impairments {' '.join(parts) if parts else 'none'}"
    return text + (f"; state {state}" if state else "")
