"""What the lab-file loaders share: the error type, file positions, and lab links to Topologies.

A containerlab or KNE file describes each link once, from end `a` to end `z`;
meshnet wants one Topology per pod with each link seen from that pod.
`lab_topologies` does that conversion, the same for both formats, so the two
formats produce identical objects for the same lab:

- uids follow the order of the links in the file, starting at 1;
- one Topology per node that has at least one link, in the order the nodes
  are declared, its links in uid order;
- lab files carry no addresses, so the links have none.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from meshwire.control.model.name_rules import dns_label_problem, dns_subdomain_problem
from meshwire.control.model.topology import LOCALHOST, Link, Topology

Path = tuple[str | int, ...]


class LoadError(ValueError):
    """A file that cannot be read as Topology objects.

    The message starts with the file and, when known, the line, then the
    place in the file (`topology.links[3].endpoints[0]`) and what is wrong.
    """

    def __init__(self, message: str, source: str = "", line: int | None = None) -> None:
        super().__init__(message)
        self.source = source
        self.line = line


class Locator(Protocol):
    def line(self, path: Path) -> int | None:
        """The 1-based line of the value at `path`, or of its nearest enclosing value."""


def render_path(path: Path) -> str:
    """`("topology", "links", 3)` -> `topology.links[3]`."""
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return out


@dataclass(frozen=True, slots=True)
class Origin:
    """A file being loaded: its name for messages and where its values are."""

    source: str
    locator: Locator

    def error(self, path: Path, message: str) -> LoadError:
        line = self.locator.line(path)
        where = f"{self.source}:{line}" if line is not None else self.source
        place = render_path(path)
        return LoadError(
            f"{where}: {place}: {message}" if place else f"{where}: {message}", self.source, line
        )


@dataclass(frozen=True, slots=True)
class LabLink:
    """One link of a lab file; `z_node` is `localhost` for a link to a host interface."""

    a_node: str
    a_intf: str
    z_node: str
    z_intf: str
    path: Path
    mtu: int = 0


def lab_namespace(name: Any, override: str | None, origin: Origin) -> str:
    """The namespace of a lab's objects: `override` if given, else the lab's `name`.

    Either must be a DNS-1123 label; the error names which one is wrong.
    """
    if override is not None:
        reason = dns_label_problem(override)
        if reason is not None:
            raise LoadError(f"{origin.source}: namespace {override!r}: {reason}", origin.source)
        return override
    if not isinstance(name, str) or not name:
        raise origin.error(("name",), "the lab name is required (it is the namespace by default)")
    reason = dns_label_problem(name)
    if reason is not None:
        raise origin.error(
            ("name",), f"the lab name is the namespace by default, and {reason}; give a namespace"
        )
    return name


def check_node_name(name: Any, origin: Origin, path: Path) -> str:
    """A node name, which becomes a pod name, so a DNS-1123 subdomain."""
    if not isinstance(name, str):
        raise origin.error(path, f"node name must be a string, got {name!r}")
    reason = dns_subdomain_problem(name)
    if reason is not None:
        raise origin.error(path, f"node name {reason} (it is the pod name)")
    if name == LOCALHOST:
        raise origin.error(path, f"node name {name!r} is reserved for links to the host")
    return name


def lab_topologies(
    links: Sequence[LabLink], nodes: Iterable[str], namespace: str, origin: Origin
) -> list[Topology]:
    """One Topology per linked node (see module doc).

    Raises LoadError naming the link for an end on an undeclared node, a link
    from a node to itself, and an interface used by two links.
    """
    declared = list(dict.fromkeys(nodes))
    ends: dict[str, list[Link]] = {name: [] for name in declared}
    used: dict[tuple[str, str], Path] = {}
    for uid, lab_link in enumerate(links, start=1):
        _check_link(lab_link, ends, used, origin)
        a, z, mtu = lab_link.a_node, lab_link.z_node, lab_link.mtu
        ends[a].append(Link(uid, z, lab_link.a_intf, lab_link.z_intf, mtu=mtu))
        if z != LOCALHOST:
            ends[z].append(Link(uid, a, lab_link.z_intf, lab_link.a_intf, mtu=mtu))
    return [
        Topology(namespace=namespace, name=name, links=tuple(ends[name]))
        for name in declared
        if ends[name]
    ]


def _check_link(
    link: LabLink,
    ends: dict[str, list[Link]],
    used: dict[tuple[str, str], Path],
    origin: Origin,
) -> None:
    pod_ends = [(link.a_node, link.a_intf)]
    if link.z_node != LOCALHOST:
        pod_ends.append((link.z_node, link.z_intf))
    for node, _ in pod_ends:
        if node not in ends:
            raise origin.error(link.path, f"node {node!r} is not declared in the nodes")
    if link.a_node == link.z_node:
        raise origin.error(
            link.path, f"both ends are on node {link.a_node!r}; a link needs two pods"
        )
    for node, intf in pod_ends:
        earlier = used.setdefault((node, intf), link.path)
        if earlier != link.path:
            line = origin.locator.line(earlier)
            at = f" (line {line})" if line is not None else ""
            raise origin.error(
                link.path,
                f"interface {node}:{intf} is already linked by {render_path(earlier)}{at}",
            )
