"""Identifiers both nodes of a cross-node link compute alike: VXLAN VNIs and wire ids.

They are pure functions of the topology (namespace, uid, pod names), never
counters, so a restarted daemon derives the same ids and its peers need no new
handshake. A namespace gets a slot from a hash of its name; within the slot the
link's uid picks the id. Two namespaces can hash to one slot: the derivation
detects the resulting VNI clash on a node and reports it on the later link
rather than building a device the kernel would refuse.
"""

from __future__ import annotations

import zlib

# uids below this fit a namespace slot; a larger uid cannot get a VNI or wire id.
UID_LIMIT = 1 << 14
VNI_MAX = (1 << 24) - 1


class IdError(ValueError):
    """The link cannot get an id (uid too large for the slot layout)."""


def namespace_slot(namespace: str, slots: int) -> int:
    return zlib.crc32(namespace.encode()) % slots


def vni(namespace: str, uid: int, base: int) -> int:
    """The VXLAN VNI of link (namespace, uid): base + slot * UID_LIMIT + uid."""
    if not 0 < uid < UID_LIMIT:
        raise IdError(f"uid {uid}: a VXLAN link needs 0 < uid < {UID_LIMIT}")
    slots = max(1, (VNI_MAX - base) // UID_LIMIT)
    return base + namespace_slot(namespace, slots) * UID_LIMIT + uid


def wire_id(namespace: str, uid: int, pod: str, peer_pod: str) -> int:
    """The id of `pod`'s end of gRPC wire (namespace, uid); the two ends differ in bit 0."""
    if not 0 < uid < UID_LIMIT:
        raise IdError(f"uid {uid}: a gRPC wire needs 0 < uid < {UID_LIMIT}")
    slot = namespace_slot(namespace, 1 << 10)
    end = 0 if pod < peer_pod else 1
    return ((slot * UID_LIMIT + uid) << 1) | end
