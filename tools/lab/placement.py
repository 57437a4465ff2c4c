"""Which node each pod runs on: round robin in file order, or a placement file.

A placement file is a YAML (or JSON) mapping `pod: node`, the pod given as
`name` or `namespace/name`. Pods it does not name are placed round robin, in
file order, over all nodes. Pure functions; errors are LabError naming the
placement file and the pod or node at fault.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from meshwire.tools.lab.errors import LabError


def round_robin(pods: list[str], nodes: list[str]) -> dict[str, str]:
    """`pods` (keys `ns/name`, in file order) -> node, cycling through `nodes`."""
    if not nodes:
        raise LabError("placement: no nodes to place pods on")
    return {pod: nodes[i % len(nodes)] for i, pod in enumerate(pods)}


def place(pods: list[str], nodes: list[str], wanted: dict[str, str]) -> dict[str, str]:
    """Pods named in `wanted` go where it says; the others round robin, in order.

    `wanted` keys are `name` or `ns/name`. Raises LabError for a key that names
    no pod (or several), and for a node that does not exist.
    """
    fixed: dict[str, str] = {}
    for key, node in wanted.items():
        pod = _resolve(key, pods)
        if node not in nodes:
            raise LabError(f"placement: pod {key}: node {node!r} is not one of {', '.join(nodes)}")
        fixed[pod] = node
    rest = round_robin([p for p in pods if p not in fixed], nodes)
    return {pod: fixed.get(pod) or rest[pod] for pod in pods}


def load_placement(path: Path) -> dict[str, str]:
    """Read a placement file; raises LabError naming the file and the bad entry."""
    try:
        data: Any = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise LabError(f"placement file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise LabError(f"placement file {path}: not valid YAML or JSON: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise LabError(f"placement file {path}: expected a mapping `pod: node`")
    out: dict[str, str] = {}
    for pod, node in data.items():
        if not isinstance(pod, str) or not isinstance(node, str):
            raise LabError(f"placement file {path}: entry {pod!r}: expected `pod: node` strings")
        out[pod] = node
    return out


def _resolve(key: str, pods: list[str]) -> str:
    if key in pods:
        return key
    matches = [p for p in pods if p.split("/", 1)[1] == key]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise LabError(f"placement: pod {key!r} is ambiguous: give one of {', '.join(matches)}")
    raise LabError(f"placement: pod {key!r} is not in the lab file")
