"""KNE topology files to Topology objects, from text protobuf (`*.pb.txt`) or YAML/JSON.

Read: `name`, each `nodes { name: "r1" ... }` and each
`links { a_node: "r1" a_int: "eth1" z_node: "r2" z_int: "eth1" }`. Every
other field, at any depth, is skipped here (vendors, configs, services,
interfaces), so KNE's own protobufs are not needed; what a node runs
(`config.command`, `args`, `env`, config files) is read by `podspec.py`,
which reports the fields not run. The YAML and JSON forms
use the same field names; JSON may also use protojson's `aNode` spelling.

As in KNE, every link end must be on a declared node and an interface takes
one link. Unlike KNE, whose uids start at 0, uids start at 1 like every lab
file here (see `labfile.py`); they only need to agree inside one lab. The
lab's `name` is the namespace unless the caller gives one, as KNE does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from meshwire.control.model.labfile import (
    LabLink,
    LoadError,
    Origin,
    Path,
    check_node_name,
    lab_namespace,
    lab_topologies,
)
from meshwire.control.model.textproto import Message, Scalar, TextProtoError, parse
from meshwire.control.model.topology import Topology

_LINK_FIELDS = (("a_node", "aNode"), ("a_int", "aInt"), ("z_node", "zNode"), ("z_int", "zInt"))


def looks_like_kne(data: Any) -> bool:
    return isinstance(data, dict) and ("nodes" in data or "links" in data)


def kne_textproto_topologies(text: str, source: str, namespace: str | None) -> list[Topology]:
    """The Topology objects of a KNE text protobuf file; raises LoadError naming file and line."""
    try:
        message = parse(text)
    except TextProtoError as error:
        raise LoadError(f"{source}:{error.line}: {error.reason}", source, error.line) from error
    lines = _LineMap()
    origin = Origin(source, lines)
    return kne_topologies(_plain(message, origin, lines), origin, namespace)


def kne_topologies(data: dict[str, Any], origin: Origin, namespace: str | None) -> list[Topology]:
    """The Topology objects of a KNE topology in its YAML/JSON shape; raises LoadError."""
    namespace = lab_namespace(data.get("name"), namespace, origin)
    nodes: list[str] = []
    for index, node in enumerate(_list(data, "nodes", origin)):
        path: Path = ("nodes", index)
        if not isinstance(node, dict):
            raise origin.error(path, f"expected a node, got {node!r}")
        name = check_node_name(node.get("name"), origin, (*path, "name"))
        if name in nodes:
            raise origin.error((*path, "name"), f"node {name!r} is declared twice")
        nodes.append(name)
    links: list[LabLink] = []
    for index, raw in enumerate(_list(data, "links", origin)):
        path = ("links", index)
        if not isinstance(raw, dict):
            raise origin.error(path, f"expected a link, got {raw!r}")
        a_node, a_int, z_node, z_int = (_text(raw, names, path, origin) for names in _LINK_FIELDS)
        links.append(LabLink(a_node, a_int, z_node, z_int, path))
    return lab_topologies(links, nodes, namespace, origin)


def _list(data: dict[str, Any], name: str, origin: Origin) -> list[Any]:
    value = data.get(name) or []
    if not isinstance(value, list):
        raise origin.error((name,), f"expected a list, got {value!r}")
    return value


def _text(raw: dict[str, Any], names: tuple[str, str], path: Path, origin: Origin) -> str:
    value = raw.get(names[0], raw.get(names[1]))
    if value is None or value == "":
        raise origin.error((*path, names[0]), "required")
    if not isinstance(value, str):
        raise origin.error((*path, names[0]), f"expected a string, got {value!r}")
    return value


@dataclass(slots=True)
class _LineMap:
    """Lines of the values read from a text protobuf, by path; filled while reading."""

    lines: dict[Path, int] = field(default_factory=dict)

    def line(self, path: Path) -> int | None:
        for size in range(len(path), -1, -1):
            if path[:size] in self.lines:
                return self.lines[path[:size]]
        return None


def _plain(message: Message, origin: Origin, lines: _LineMap) -> dict[str, Any]:
    """The fields this loader reads, shaped as in KNE's YAML form."""
    data: dict[str, Any] = {}
    name = _string(message, "name", (), origin, lines)
    if name is not None:
        data["name"] = name
    for repeated, wanted in (("nodes", ("name",)), ("links", tuple(n for n, _ in _LINK_FIELDS))):
        items: list[dict[str, str]] = []
        for index, item in enumerate(message.named(repeated)):
            path: Path = (repeated, index)
            lines.lines[path] = item.line
            if not isinstance(item.value, Message):
                raise origin.error(path, f"expected a message {{ ... }}, got {item.value.text!r}")
            values = {n: _string(item.value, n, path, origin, lines) for n in wanted}
            items.append({n: v for n, v in values.items() if v is not None})
        if items:
            data[repeated] = items
    return data


def _string(message: Message, name: str, path: Path, origin: Origin, lines: _LineMap) -> str | None:
    fields = message.named(name)
    if not fields:
        return None
    lines.lines[(*path, name)] = fields[-1].line
    if len(fields) > 1:
        raise origin.error((*path, name), f"given more than once (first on line {fields[0].line})")
    value = fields[0].value
    if not isinstance(value, Scalar) or not value.quoted:
        shown = value.text if isinstance(value, Scalar) else "{ ... }"
        raise origin.error((*path, name), f"expected a quoted string, got {shown}")
    return value.text
