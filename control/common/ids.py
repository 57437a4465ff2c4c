"""Identifiers both nodes of a cross-node link compute alike: VXLAN VNIs and wire ids.

Every namespace that holds a Topology gets a `Slot` from the cluster's
IdAllocation object (`common/slots.py` allocates, `daemon/slot_keeper.py`
keeps it): a `vni_slot` and a `wire_slot`, each held by that namespace alone.
Within its slot, the link's uid picks the id:

    VNI     = vni_base + vni_slot * UID_LIMIT + uid          (0 < uid < UID_LIMIT)
    wire id = ((wire_slot * UID_LIMIT + uid) << 1) | end      (end: 0 for the pod
                                                              whose name sorts first)

Invariants, and why they hold:
- Unique across the cluster: slots are distinct between namespaces (the
  allocation refuses to hand one out twice), uids are distinct within a
  namespace (validation), and `uid < UID_LIMIT`, so (slot, uid) -> id is
  injective. The two ends of a wire differ in bit 0 only.
- Equal on both nodes: every node reads the same allocation object and derives
  from (slot, uid, pod names) alone; nothing is negotiated per link.
- Stable across restarts: the slot lives in the API, not in a daemon; ids are
  never counters.
- In range: a VNI is at most VNI_MAX because `vni_slot < vni_slots(base)`;
  a wire id fits 32 bits because `wire_slot < WIRE_SLOTS`.

`preferred_slot` is the slot meshwire derived from a hash of the name before
the allocation existed (crc32). The allocator hands it out whenever it is
free, so a lab that ran under the hash keeps its ids; only a namespace whose
hashed slot another holds (exactly the ones whose links the hash broke) moves.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

# uids below this fit a namespace slot; a larger uid cannot get a VNI or wire id.
UID_LIMIT = 1 << 14
VNI_MAX = (1 << 24) - 1
# Wire slots: ((WIRE_SLOTS * UID_LIMIT) << 1) fits the 32-bit wire id of a frame.
WIRE_SLOTS = 1 << 10


class IdError(ValueError):
    """The link cannot get an id (uid too large for the slot layout, slot out of range)."""


@dataclass(frozen=True, slots=True, order=True)
class Slot:
    """A namespace's share of the id spaces: VNIs and wire ids alike."""

    vni_slot: int
    wire_slot: int


def vni_slots(base: int) -> int:
    """How many namespaces fit the VNIs from `base` up to VNI_MAX (1023 for base 5000)."""
    return max(0, (VNI_MAX - base) // UID_LIMIT)


def preferred_slot(namespace: str, base: int) -> Slot:
    """The slot a hash of the name gives: the allocator's first choice."""
    digest = zlib.crc32(namespace.encode())
    return Slot(digest % max(1, vni_slots(base)), digest % WIRE_SLOTS)


def _check_uid(uid: int, what: str) -> None:
    if not 0 < uid < UID_LIMIT:
        raise IdError(f"uid {uid}: a {what} needs 0 < uid < {UID_LIMIT}")


def vni(slot: Slot, uid: int, base: int) -> int:
    """The VXLAN VNI of link `uid` of the namespace holding `slot`."""
    _check_uid(uid, "VXLAN link")
    if not 0 <= slot.vni_slot < vni_slots(base):
        raise IdError(
            f"VNI slot {slot.vni_slot} is past the {vni_slots(base)} slots that "
            f"vxlan.vni_base {base} leaves (is vni_base the same on every node?)"
        )
    return base + slot.vni_slot * UID_LIMIT + uid


def wire_id(slot: Slot, uid: int, pod: str, peer_pod: str) -> int:
    """The id of `pod`'s end of gRPC wire `uid`; the two ends differ in bit 0."""
    _check_uid(uid, "gRPC wire")
    if not 0 <= slot.wire_slot < WIRE_SLOTS:
        raise IdError(f"wire slot {slot.wire_slot} is not 0..{WIRE_SLOTS - 1}")
    end = 0 if pod < peer_pod else 1
    return ((slot.wire_slot * UID_LIMIT + uid) << 1) | end


def far_end(wire: int) -> int:
    """The id of the other end of the wire whose one end is `wire`."""
    return wire ^ 1
