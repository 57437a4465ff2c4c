"""Semantic checks on Topology objects: which links can be wired, and why not.

Two levels, both pure:

- `validate_topology(t)` checks one object on its own: names, addresses,
  uid range, duplicates and self-links. It returns the links that pass and one
  `LinkProblem` per problem found. A bad link is skipped; the object's other
  links still work.
- `check_pair(a, link, b)` checks that the two ends of a link agree, once the
  peer pod's object `b` is known. A missing peer object is not a problem (the
  peer is "not yet" there); a peer object that lacks the link or points
  elsewhere is.

`check_all(topologies)` runs both over a whole set (a file being applied).

Cost: both are O(links). Checks of an unchanged link and lookups into an
unchanged object are cached (bounded), so re-checking a 1500-link pod after a
change elsewhere takes a few milliseconds.

Decisions, with the reason:

- uid 0 is valid: KNE numbers the links of a topology from 0, and those
  objects must load unchanged. The upper bound 2**24-1 leaves room to derive a
  24-bit VXLAN VNI from a uid.
- An address is an interface address with a prefix length, v4 or v6
  (`10.0.0.1/24`, `2001:db8::1/64`), as meshnet parses it (Go's
  `net.ParseCIDR`). Host bits all zero or all one (`10.0.0.0/24`) are
  accepted because meshnet and the kernel accept them. Rejected: no prefix, a
  netmask instead of a prefix length, a zone (`%eth0`), the unspecified
  address and multicast addresses (not interface addresses), and the same
  address on both ends.
- Duplicates inside one pod (a `local_intf` or a `uid` used twice): the
  first link in spec order is kept, each later one is reported, so appending
  a conflicting link never breaks a working one.
- A link's `mtu` (meshwire's own field) is 68..65535, the kernel's range for
  the devices meshwire makes; given on both ends, the two must be equal. Given
  on one end only, it holds for both (see `link_mtu`).
- A link's `local_mac` (meshwire's own field) is a unicast MAC, not all zero
  (`macs.mac_problem`); the two ends' MACs, given or derived, must differ
  (derived ones always do, see `macs.py`).
- A link end's `impairments` and `state` (meshwire's own, `emulation.py`):
  percentages 0..100, delay 0..60000 ms, jitter no larger than delay, rate
  0..1,000,000 Mbit/s, state `up` or `down`. Each end sets its own (they
  need not agree); a macvlan link to the host cannot carry them.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from meshwire.control.model import emulation
from meshwire.control.model.macs import end_mac, mac_problem
from meshwire.control.model.name_rules import dns_subdomain_problem, interface_name_problem
from meshwire.control.model.topology import LOCALHOST, Link, Topology

MIN_UID = 0
MAX_UID = 2**24 - 1
# IFLA_MTU bounds every kind meshwire makes accepts (68: the IPv4 minimum).
MIN_MTU = 68
MAX_MTU = 65535

_PREFIX = re.compile(r"[0-9]{1,3}")


@dataclass(frozen=True, slots=True)
class LinkProblem:
    """One reason a link cannot be wired.

    `index` is the link's position in `spec.links` of the object
    `topology_key` (`ns/name`); `field` is the link field at fault.
    """

    topology_key: str
    uid: int
    index: int
    field: str
    message: str

    def __str__(self) -> str:
        return (
            f"topology {self.topology_key}: link uid {self.uid} "
            f"(spec.links[{self.index}]): {self.field}: {self.message}"
        )


@dataclass(frozen=True, slots=True)
class Validated:
    """The result of `validate_topology`: the usable links, in spec order, and the problems."""

    topology: Topology
    links: tuple[Link, ...]
    problems: tuple[LinkProblem, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def validate_topology(topology: Topology) -> Validated:
    """Check each link of one object on its own; never raises for bad data."""
    problems: list[LinkProblem] = []
    bad: set[int] = set()
    first_intf: dict[str, int] = {}
    first_uid: dict[int, int] = {}
    for index, link in enumerate(topology.links):
        found = [
            LinkProblem(topology.key, link.uid, index, field, message)
            for field, message in _link_problems(topology.name, link)
        ]
        earlier = first_uid.setdefault(link.uid, index)
        if earlier != index:
            message = f"uid {link.uid} is already used by spec.links[{earlier}]"
            found.append(LinkProblem(topology.key, link.uid, index, "uid", message))
        earlier = first_intf.setdefault(link.local_intf, index)
        if earlier != index:
            message = f"interface {link.local_intf!r} is already used by spec.links[{earlier}]"
            found.append(LinkProblem(topology.key, link.uid, index, "local_intf", message))
        if found:
            bad.add(index)
            problems.extend(found)
    links = tuple(link for index, link in enumerate(topology.links) if index not in bad)
    return Validated(topology, links, tuple(problems))


def check_pair(a: Topology, link_a: Link, b: Topology | None) -> LinkProblem | None:
    """Whether `link_a` of `a` and the peer object `b` describe the same link.

    `b` is the object of the pod `link_a.peer_pod` in `a`'s namespace, or None
    when it does not exist (yet): that, and a link to the host, are never a
    problem. Otherwise `b` must have a link with the same uid that points back
    at `a`, with the two interfaces swapped and, where both sides give one,
    the two addresses swapped, the same MTU where both give one, and two
    different MACs (given or derived). Returns the first disagreement found.

    Raises ValueError if `b` is not the peer pod's object or `link_a` is not
    a link of `a` (a caller's mistake, not bad data).
    """
    index = _link_index(a).position(a, link_a)
    if b is None or link_a.to_host:
        return None
    if b.namespace != a.namespace or b.name != link_a.peer_pod:
        raise ValueError(
            f"check_pair: topology {b.key} is not the peer of topology {a.key} "
            f"link uid {link_a.uid} (peer_pod {link_a.peer_pod!r})"
        )

    def problem(field: str, message: str) -> LinkProblem:
        return LinkProblem(a.key, link_a.uid, index, field, message)

    link_b = _link_index(b).by_uid.get(link_a.uid)
    if link_b is None:
        return problem("uid", f"peer topology {b.key} has no link with uid {link_a.uid}")
    peer = f"peer topology {b.key} link uid {link_a.uid}"
    if link_b.peer_pod != a.name:
        return problem("peer_pod", f"{peer} points at {link_b.peer_pod!r}, not back at {a.name!r}")
    if link_b.local_intf != link_a.peer_intf:
        return problem(
            "peer_intf",
            f"{link_a.peer_intf!r} but {peer} has local_intf {link_b.local_intf!r}",
        )
    if link_b.peer_intf != link_a.local_intf:
        return problem(
            "local_intf",
            f"{link_a.local_intf!r} but {peer} has peer_intf {link_b.peer_intf!r}",
        )
    if not _same_address(link_a.peer_ip, link_b.local_ip):
        return problem("peer_ip", f"{link_a.peer_ip!r} but {peer} has local_ip {link_b.local_ip!r}")
    if not _same_address(link_a.local_ip, link_b.peer_ip):
        return problem("local_ip", f"{link_a.local_ip!r} but {peer} has peer_ip {link_b.peer_ip!r}")
    if link_a.mtu and link_b.mtu and link_a.mtu != link_b.mtu:
        return problem("mtu", f"{link_a.mtu} but {peer} has mtu {link_b.mtu}")
    if link_a.local_mac or link_b.local_mac:
        mac_a, mac_b = end_mac(a.namespace, a.name, link_a), end_mac(b.namespace, b.name, link_b)
        if mac_a == mac_b:
            mine = "" if link_a.local_mac else "derived "
            return problem("local_mac", f"the {mine}MAC {mac_a} is also the MAC of {peer}")
    return None


def link_mtu(link: Link, peer: Topology | None, default: int) -> int:
    """The MTU of `link`, whose ends agree (`check_pair`) when `peer` (the peer pod's
    object) is given: the one either end gives, else `default`. The same on both
    nodes of a cross-node link."""
    if link.mtu or peer is None:
        return link.mtu or default
    peer_link = _link_index(peer).by_uid.get(link.uid)
    return (peer_link.mtu if peer_link is not None else 0) or default


def check_all(topologies: Iterable[Topology]) -> list[LinkProblem]:
    """Every problem in a set of objects: each one's own, then each valid link against its peer.

    A peer pod with no object in the set is not a problem (see `check_pair`).
    """
    objects = list(topologies)
    by_key = {t.key: t for t in objects}
    problems: list[LinkProblem] = []
    for topology in objects:
        validated = validate_topology(topology)
        problems.extend(validated.problems)
        for link in validated.links:
            peer = by_key.get(f"{topology.namespace}/{link.peer_pod}")
            mismatch = check_pair(topology, link, peer)
            if mismatch is not None:
                problems.append(mismatch)
    return problems


def address_problem(value: str) -> str | None:
    """Why `value` is not an interface address with a prefix length, or None (see module doc)."""
    address, slash, prefix = value.partition("/")
    if not slash:
        return f"{value!r} has no prefix length (write e.g. 10.0.0.1/24 or 2001:db8::1/64)"
    if "%" in address:
        return f"{value!r} has a zone; a zone is not allowed in an interface address"
    if not _PREFIX.fullmatch(prefix):
        return f"{value!r}: the prefix length must be a number (not a netmask)"
    interface = _interface(value)
    if interface is None:
        reason = _parse_error(value)
        return f"{value!r} is not an IPv4 or IPv6 address with prefix length: {reason}"
    if interface.ip.is_unspecified or interface.ip.is_multicast:
        return f"{value!r} is not a unicast interface address"
    return None


# Re-deriving a pod re-checks the same links (Link is an immutable value), and
# checking one is mostly address parsing: a pod with many links would pay for it
# on every derivation.
@functools.lru_cache(maxsize=1 << 16)
def _link_problems(own_name: str, link: Link) -> tuple[tuple[str, str], ...]:
    return tuple(_each_link_problem(own_name, link))


def _each_link_problem(own_name: str, link: Link) -> Iterable[tuple[str, str]]:
    if not MIN_UID <= link.uid <= MAX_UID:
        yield "uid", f"{link.uid} is out of range {MIN_UID}..{MAX_UID}"
    if not link.peer_pod:
        yield "peer_pod", f"required (a pod name or {LOCALHOST!r})"
    elif link.peer_pod == own_name:
        yield "peer_pod", f"{own_name!r} is the pod itself; a link needs two pods"
    elif link.peer_pod != LOCALHOST:
        reason = dns_subdomain_problem(link.peer_pod)
        if reason is not None:
            yield "peer_pod", f"{reason}; a pod name or {LOCALHOST!r} is required"
    for field in ("local_intf", "peer_intf"):
        reason = interface_name_problem(getattr(link, field))
        if reason is not None:
            yield field, reason
    for field in ("local_ip", "peer_ip"):
        value = getattr(link, field)
        reason = address_problem(value) if value else None
        if reason is not None:
            yield field, reason
    if link.local_ip and link.peer_ip and _same_address(link.local_ip, link.peer_ip):
        yield "peer_ip", f"{link.peer_ip!r} is the same address as local_ip"
    if link.mtu and not MIN_MTU <= link.mtu <= MAX_MTU:
        yield "mtu", f"{link.mtu} is out of range {MIN_MTU}..{MAX_MTU}"
    reason = mac_problem(link.local_mac) if link.local_mac else None
    if reason is not None:
        yield "local_mac", reason
    yield from emulation.problems(link.impairments)
    reason = emulation.state_problem(link.state)
    if reason is not None:
        yield "state", reason
    if link.to_host and (link.impairments or link.down):
        yield (
            "impairments" if link.impairments else "state",
            "a link to the host (macvlan) cannot be emulated; only pod-to-pod links can",
        )


def _same_address(left: str, right: str) -> bool:
    """Whether two addresses are equal, `''` matching anything (an address not given)."""
    if not left or not right or left == right:
        return True
    parsed_left, parsed_right = _interface(left), _interface(right)
    if parsed_left is None or parsed_right is None:
        return False  # different strings, one of them not an address
    return parsed_left == parsed_right


# A lab names each address twice (one end's local_ip, the other's peer_ip), and
# parsing is most of checking a link: the embedded API's admission spent half of
# each create in it.
@functools.lru_cache(maxsize=1 << 16)
def _interface(value: str) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface | None:
    """`value` as an interface address, None when it is not one."""
    try:
        return ipaddress.ip_interface(value)
    except ValueError:
        return None


def _parse_error(value: str) -> str:
    """What the parser says of `value`, which `_interface` did not take."""
    try:
        ipaddress.ip_interface(value)
    except ValueError as error:
        return str(error)
    return "not an interface address"


@dataclass(frozen=True, slots=True)
class _LinkIndex:
    """O(1) lookups into one (immutable) Topology, so checking every link of a pod is O(links)."""

    topology: Topology
    by_identity: dict[int, int]
    by_uid: dict[int, Link]

    def position(self, topology: Topology, link: Link) -> int:
        index = self.by_identity.get(id(link))
        if index is None:
            index = next((i for i, other in enumerate(topology.links) if other == link), None)
        if index is None:
            raise ValueError(
                f"check_pair: link uid {link.uid} is not a link of topology {topology.key}"
            )
        return index


# The last few objects indexed, by identity. An entry holds its Topology, so
# the id cannot be reused while the entry lives; the bound keeps memory flat.
_INDEXES: OrderedDict[int, _LinkIndex] = OrderedDict()
_INDEXES_KEPT = 64


def _link_index(topology: Topology) -> _LinkIndex:
    entry = _INDEXES.get(id(topology))
    if entry is not None and entry.topology is topology:
        _INDEXES.move_to_end(id(topology))
        return entry
    by_uid: dict[int, Link] = {}
    for link in topology.links:
        by_uid.setdefault(link.uid, link)  # the first one, as Topology.link() finds it
    entry = _LinkIndex(topology, {id(link): i for i, link in enumerate(topology.links)}, by_uid)
    _INDEXES[id(topology)] = entry
    if len(_INDEXES) > _INDEXES_KEPT:
        _INDEXES.popitem(last=False)
    return entry
