"""The meshnet Topology object (`networkop.co.uk/v1beta1`, kind `Topology`).

Field names are meshnet's, exactly, at the boundary (`peer_pod`, `local_intf`,
`src_ip`, `net_ns`, `plumbing_error`): a Topology written for meshnet loads here
unchanged, and one written back reads the same in meshnet's tools.

The objects are immutable values. `from_dict` only reshapes what the API gives;
it raises `ModelError` for a shape it cannot read (a link that is not a mapping,
a uid that is not an integer). Semantic checks (interface names, addresses,
both ends agreeing) live in `validate.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from meshwire.control.model.emulation import (
    ANNOTATION,
    EmulationError,
    Impairments,
    read_annotation,
)

GROUP = "networkop.co.uk"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "Topology"
PLURAL = "topologies"

# `peer_pod: localhost` asks for a macvlan on the host interface `peer_intf`.
LOCALHOST = "localhost"


class ModelError(ValueError):
    """An object whose shape cannot be read; the message names the object and field."""


@dataclass(frozen=True, slots=True)
class Link:
    uid: int
    peer_pod: str
    local_intf: str
    peer_intf: str
    local_ip: str = ""
    peer_ip: str = ""
    # meshwire's own optional field (meshnet #54): this link's MTU, both ends; 0 or
    # absent: the daemon's `mtu`. meshnet ignores it.
    mtu: int = 0
    # meshwire's own optional field (meshnet #54): this end's MAC address; "" or
    # absent: derived from (namespace, pod, interface) (`macs.py`). meshnet ignores it.
    local_mac: str = ""
    # meshwire's own optional fields (model/emulation.py): what happens to the frames
    # this end sends, and the cable: "up" (or "") or "down". meshnet ignores them.
    impairments: Impairments = field(default_factory=Impairments)
    state: str = ""

    @property
    def down(self) -> bool:
        return self.state == "down"

    @property
    def emulated(self) -> bool:
        """Whether this end asks for the workers' path: impairments, or a `state` given
        (`up` too, so a plugged cable keeps its interfaces and their ifindex)."""
        return bool(self.impairments) or bool(self.state)

    @property
    def to_host(self) -> bool:
        return self.peer_pod == LOCALHOST

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "uid": self.uid,
            "peer_pod": self.peer_pod,
            "local_intf": self.local_intf,
            "peer_intf": self.peer_intf,
        }
        if self.local_ip:
            out["local_ip"] = self.local_ip
        if self.peer_ip:
            out["peer_ip"] = self.peer_ip
        if self.mtu:
            out["mtu"] = self.mtu
        if self.local_mac:
            out["local_mac"] = self.local_mac
        if self.impairments:
            out["impairments"] = self.impairments.to_dict()
        if self.state:
            out["state"] = self.state
        return out


@dataclass(frozen=True, slots=True)
class Skipped:
    """An entry of `status.skipped`: KNE's meshnet writes {pod_name, link_id}; upstream
    meshnet's CRD lists pod names alone, read as link_id 0."""

    pod_name: str
    link_id: int


@dataclass(frozen=True, slots=True)
class TopologyStatus:
    skipped: tuple[Skipped, ...] = ()
    src_ip: str = ""
    net_ns: str = ""
    container_id: str = ""
    plumbing_error: str = ""
    # meshwire's: the pod's links a change of emulation rebuilt (reconcile/rebuilds.py).
    link_rebuilds: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.skipped:
            out["skipped"] = [{"pod_name": s.pod_name, "link_id": s.link_id} for s in self.skipped]
        for name in ("src_ip", "net_ns", "container_id", "plumbing_error", "link_rebuilds"):
            value = getattr(self, name)
            if value:
                out[name] = value
        return out


@dataclass(frozen=True, slots=True)
class Topology:
    namespace: str
    name: str
    links: tuple[Link, ...] = ()
    status: TopologyStatus = field(default_factory=TopologyStatus)
    uid: str = ""
    resource_version: str = ""
    generation: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    # Links by uid (the first of each uid), built on the first `link()` call: a
    # pod with 1,500 links is looked up once per link when derived, which a
    # scan made quadratic. Not a field of the object's value.
    _by_uid: dict[int, Link] | None = field(default=None, init=False, compare=False, repr=False)
    # What `from_dict` read the links from (spec.links and the emulation annotation, as
    # given), so that the object's next version, when those are equal, keeps these links
    # instead of reading each again: most watch events are status writes. Not a field of
    # the object's value; kept by `replace`.
    _source: tuple[Any, Any] | None = field(default=None, compare=False, repr=False)

    def link(self, uid: int) -> Link | None:
        by_uid = self._by_uid
        if by_uid is None:
            by_uid = {}
            for link in self.links:
                by_uid.setdefault(link.uid, link)
            object.__setattr__(self, "_by_uid", by_uid)
        return by_uid.get(uid)

    def to_dict(self) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if self.uid:
            metadata["uid"] = self.uid
        if self.resource_version:
            metadata["resourceVersion"] = self.resource_version
        if self.generation:
            metadata["generation"] = self.generation
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": metadata,
            "spec": {"links": [link.to_dict() for link in self.links]},
            "status": self.status.to_dict(),
        }

    @classmethod
    def from_dict(
        cls, obj: Any, default_namespace: str = "default", previous: Topology | None = None
    ) -> Topology:
        """The Topology `obj` holds; raises ModelError naming the object and field.

        `previous`, an earlier version of the object, lends its links when they were
        read from the same spec.links and annotation."""
        if not isinstance(obj, dict):
            raise ModelError(f"topology: expected a mapping, got {type(obj).__name__}")
        meta = _mapping(obj.get("metadata"), "topology", "metadata")
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise ModelError("topology: metadata.name: required")
        namespace = meta.get("namespace") or default_namespace
        if not isinstance(namespace, str):
            raise ModelError(f"topology {name}: metadata.namespace: must be a string")
        where = f"topology {namespace}/{name}"
        spec = _mapping(obj.get("spec"), where, "spec")
        raw_links = spec.get("links") or []
        if not isinstance(raw_links, list):
            raise ModelError(f"{where}: spec.links: expected a list")
        annotations = _mapping(meta.get("annotations"), where, "annotations")
        source = (raw_links, annotations.get(ANNOTATION))
        if previous is not None and previous._source == source:
            links = previous.links
        else:
            links = tuple(
                _link(raw, f"{where}: spec.links[{i}]") for i, raw in enumerate(raw_links)
            )
            links = _with_annotation(links, annotations, where)
        status = _status(_mapping(obj.get("status"), where, "status"), where)
        generation = meta.get("generation") or 0
        return cls(
            namespace=namespace,
            name=name,
            links=links,
            status=status,
            uid=str(meta.get("uid") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            generation=generation if isinstance(generation, int) else 0,
            _source=source,
        )


def _mapping(value: Any, where: str, name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ModelError(f"{where}: {name}: expected a mapping, got {type(value).__name__}")
    return value


def _integer(value: Any, where: str, name: str) -> int:
    # YAML and JSON give ints; a bool is an int in Python but never a uid.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelError(f"{where}: {name}: expected an integer, got {value!r}")
    return value


def _string(raw: dict[str, Any], where: str, name: str) -> str:
    value = raw.get(name, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ModelError(f"{where}: {name}: expected a string, got {value!r}")
    return value


def _link(raw: Any, where: str) -> Link:
    if not isinstance(raw, dict):
        raise ModelError(f"{where}: expected a mapping, got {type(raw).__name__}")
    if "uid" not in raw:
        raise ModelError(f"{where}: uid: required")
    return Link(
        uid=_integer(raw["uid"], where, "uid"),
        peer_pod=_string(raw, where, "peer_pod"),
        local_intf=_string(raw, where, "local_intf"),
        peer_intf=_string(raw, where, "peer_intf"),
        local_ip=_string(raw, where, "local_ip"),
        peer_ip=_string(raw, where, "peer_ip"),
        mtu=0 if raw.get("mtu") is None else _integer(raw["mtu"], where, "mtu"),
        local_mac=_string(raw, where, "local_mac"),
        impairments=_impairments(raw.get("impairments"), where),
        state=_string(raw, where, "state"),
    )


def _impairments(raw: Any, where: str) -> Impairments:
    try:
        return Impairments.from_dict(raw)
    except EmulationError as exc:
        raise ModelError(f"{where}: {exc}") from None


def _with_annotation(
    links: tuple[Link, ...], annotations: dict[str, Any], where: str
) -> tuple[Link, ...]:
    """The links with what the emulation annotation says of their interfaces applied."""
    try:
        entries = read_annotation(annotations.get(ANNOTATION))
    except EmulationError as exc:
        raise ModelError(f"{where}: metadata.{exc}") from None
    if not entries:
        return links
    out = []
    for link in links:
        entry = entries.get(link.local_intf)
        if entry is not None:
            if entry.impairments is not None:
                link = replace(link, impairments=entry.impairments)
            if entry.state is not None:
                link = replace(link, state=entry.state)
        out.append(link)
    return tuple(out)


def _status(raw: dict[str, Any], where: str) -> TopologyStatus:
    skipped_raw = raw.get("skipped") or []
    if not isinstance(skipped_raw, list):
        raise ModelError(f"{where}: status.skipped: expected a list")
    skipped = []
    for i, item in enumerate(skipped_raw):
        item_where = f"{where}: status.skipped[{i}]"
        if isinstance(item, str):
            skipped.append(Skipped(pod_name=item, link_id=0))
            continue
        item = _mapping(item, item_where, "entry")
        skipped.append(
            Skipped(
                pod_name=_string(item, item_where, "pod_name"),
                link_id=_integer(item.get("link_id", 0), item_where, "link_id"),
            )
        )
    return TopologyStatus(
        skipped=tuple(skipped),
        src_ip=_string(raw, f"{where}: status", "src_ip"),
        net_ns=_string(raw, f"{where}: status", "net_ns"),
        container_id=_string(raw, f"{where}: status", "container_id"),
        plumbing_error=_string(raw, f"{where}: status", "plumbing_error"),
        link_rebuilds=_string(raw, f"{where}: status", "link_rebuilds"),
    )
