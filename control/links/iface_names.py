"""The one place that names interfaces and marks them as meshwire's.

Ownership mark: the interface alias (IFLA_IFALIAS) `meshwire:<ns>/<uid>`, where
`<ns>` is the topology's Kubernetes namespace and `<uid>` the link uid. Only an
interface carrying a mark is ever deleted by meshwire; a NOS's own interfaces
never carry one.

Addresses meshwire assigns carry the address protocol `ADDRESS_PROTO`
(IFA_PROTO, Linux 6.1+), so a stale one can be told from an address the NOS
configured on the same interface.

Build group: the kernel takes no alias at creation, so an interface created
by netlink (veth, vxlan, macvlan) is created under its final name in the
interface group `BUILD_GROUP` (IFLA_GROUP, which creation does take), then
marked. An interface in that group without a mark is a build cut short (a
crash between the two requests): it is meshwire's, and is deleted when its
name is needed or no row wants it (`Iface.half_made`), never taken for a
foreign one. No renaming: a rename costs the kernel an RCU grace period
under its lock (synchronize_net).

Temporary names: a TAP, made by ioctl, cannot be created in a group; it is
created under a temporary name, marked, then renamed (see lifecycle.py). A
temporary name is `mw` + 11 hex digits of a hash of the row key + one letter
for the role: 14 bytes, within IFNAMSIZ, the same on every attempt for a row
(so the next attempt finds and removes a leftover) and distinct between rows
barring a 44-bit hash collision.

Node names: every pod end is a veth whose peer lives in the node's netns
(podend.py), and what carries the link (a vxlan device, a TAP) lives there
too (stitch.py). Those interfaces are named by `node_name`: `mn` + 12 hex
digits of a hash of what they belong to + one letter for the role: 15
bytes, the same on every node and after every restart, so a daemon finds
them again by name alone.

Aside names: an interface in the way of a new one (the end a restarted pod's
peer still holds) is renamed `mwold` + its ifindex in 8 hex digits
(`aside_name`) and deleted later (aside.py): unique in its netns as the
ifindex is, marked as it was, never a temporary name (`o` is no hex digit).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum

MARK_PREFIX = "meshwire:"
ASIDE_PREFIX = "mwold"
# Address protocol for addresses meshwire assigns (0-3 are the kernel's own).
ADDRESS_PROTO = 0x6D
# The interface group an interface is created in until it is marked ("mwir").
BUILD_GROUP = 0x6D776972


@dataclass(frozen=True, slots=True)
class Mark:
    namespace: str
    uid: int

    @property
    def link(self) -> str:
        return f"{self.namespace}/{self.uid}"

    def format(self) -> str:
        return f"{MARK_PREFIX}{self.namespace}/{self.uid}"


def parse_mark(alias: str | None) -> Mark | None:
    """The mark in an interface alias, or None for any alias that is not exactly one."""
    if not alias or not alias.startswith(MARK_PREFIX):
        return None
    namespace, sep, uid = alias[len(MARK_PREFIX) :].rpartition("/")
    if not sep or not namespace or not uid.isdigit():
        return None
    return Mark(namespace, int(uid))


class Role(StrEnum):
    """What a temporary name is for; the value is the name's last letter."""

    VETH_LOCAL = "a"
    VETH_PEER = "b"
    VXLAN = "x"
    MACVLAN = "m"
    TAP = "t"


def temp_name(row_key: str, role: Role) -> str:
    digest = hashlib.blake2b(row_key.encode(), digest_size=8).hexdigest()
    return f"mw{digest[:11]}{role.value}"


class NodeRole(StrEnum):
    """What a node-side interface is for; the value is the name's last letter."""

    # The node-side peer of a pod end; named for (namespace, pod, interface).
    POD_PEER = "p"
    # A vxlan device carrying a row; named for the row's key.
    VXLAN = "x"
    # A TAP the workers carry a row through; named for the row's key.
    TAP = "g"


def node_name(key: str, role: NodeRole) -> str:
    """The name of a node-side interface for `key` (15 bytes, IFNAMSIZ's limit)."""
    digest = hashlib.blake2b(f"{role.value}:{key}".encode(), digest_size=8).hexdigest()
    return f"mn{digest[:12]}{role.value}"


def pod_peer_name(namespace: str, pod: str, intf: str) -> str:
    """The node-side peer of pod `pod`'s interface `intf` in topology namespace `namespace`."""
    return node_name(f"{namespace}/{pod}/{intf}", NodeRole.POD_PEER)


def aside_name(ifindex: int) -> str:
    """The name an interface is set aside under until it is deleted (13 bytes)."""
    return f"{ASIDE_PREFIX}{ifindex:08x}"


def is_aside(name: str) -> bool:
    """Whether `name` is one `aside_name` gives."""
    digits = name.removeprefix(ASIDE_PREFIX)
    return (
        len(name) == len(ASIDE_PREFIX) + 8
        and digits != name
        and all(c in "0123456789abcdef" for c in digits)
    )
