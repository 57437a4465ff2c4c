"""MAC addresses of the interfaces meshwire makes in pods: given, or derived and stable.

A router's port keeps its MAC when the router reboots; a pod's link end keeps
its MAC when the pod restarts, moves to another node or its node's daemon
restarts, so the peers' neighbour caches stay right and traffic resumes as soon
as the link is back.

- A link's own `local_mac` (meshwire's field, meshnet #54: a NOS that needs a
  given MAC gets it from the topology) is used as written, in lower case.
- Otherwise the MAC is derived from (namespace, pod, interface) by SHA-256:
  locally administered (bit 0x02 of the first byte set), unicast (bit 0x01
  clear), so it never clashes with a vendor's address. Bit 0x04 of the first
  byte is the end's side of the link: set on the end whose (pod, interface)
  sorts after its peer's. The two ends of a link are different pods (a
  self-link is invalid), so exactly one of them has the bit set: **two derived
  ends of one link never share a MAC**, whatever the hash gives. A link is
  point to point, so its two ends are the only MACs that meet on its segment.
  The other 45 bits are the hash's.
- A given MAC may still equal the other end's; `validate.check_pair` refuses
  such a link, naming the field.
"""

from __future__ import annotations

import hashlib
import re

from meshwire.control.model.topology import Link

_MAC = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")
LOCAL = 0x02
MULTICAST = 0x01
SIDE = 0x04


def mac_problem(value: str) -> str | None:
    """Why `value` cannot be an interface's MAC, or None.

    Accepted: six hex bytes separated by colons, any case, unicast, not all
    zero; locally administered or not (a NOS may want its vendor's prefix).
    """
    if not _MAC.fullmatch(value):
        example = "02:00:5e:10:00:01"
        return f"{value!r} is not a MAC address (six hex bytes with colons, e.g. {example})"
    first = int(value[:2], 16)
    if first & MULTICAST:
        return (
            f"{value!r} is a multicast address (bit 0x01 of the first byte); "
            "an interface needs a unicast one"
        )
    if int(value.replace(":", ""), 16) == 0:
        return f"{value!r} is all zero"
    return None


def derived_mac(namespace: str, pod: str, intf: str, peer_pod: str, peer_intf: str) -> str:
    """The stable MAC of `pod`'s interface `intf`, whose link's other end is
    `peer_pod`'s `peer_intf` (see the module doc)."""
    digest = bytearray(hashlib.sha256(f"{namespace}\0{pod}\0{intf}".encode()).digest()[:6])
    side = SIDE if (pod, intf) > (peer_pod, peer_intf) else 0
    digest[0] = (digest[0] & ~(LOCAL | MULTICAST | SIDE) & 0xFF) | LOCAL | side
    return ":".join(f"{byte:02x}" for byte in digest)


def end_mac(namespace: str, pod: str, link: Link) -> str:
    """The MAC of `pod`'s end of `link`: its `local_mac`, or the derived one."""
    if link.local_mac:
        return link.local_mac.lower()
    return derived_mac(namespace, pod, link.local_intf, link.peer_pod, link.peer_intf)
