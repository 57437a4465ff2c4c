"""The IdAllocation object and the pure steps on it: read, claim, release, write.

One cluster-scoped object, `idallocations.meshwire.dev/v1alpha1` named
`namespaces`, maps every namespace that has (or recently had) a Topology to its
`Slot` (see `ids.py` for what a slot gives):

    apiVersion: meshwire.dev/v1alpha1
    kind: IdAllocation
    metadata: {name: namespaces, resourceVersion: "42"}
    spec:
      namespaces:
        lab1: {vniSlot: 12, wireSlot: 400}

Invariant the writers keep: no two namespaces share a `vniSlot`, and none share
a `wireSlot`. Every writer reads the object, computes the change here, and
replaces the object carrying the resourceVersion it read, so a concurrent
writer's change is never overwritten: the API answers 409 and the writer
starts again from a fresh read (optimistic concurrency, as Kubernetes
controllers do). Entries that do not parse are kept as written and their slots
counted as taken, so a writer never hands out a slot it cannot read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from meshwire.control.common.ids import WIRE_SLOTS, Slot, preferred_slot, vni_slots

GROUP = "meshwire.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "IdAllocation"
PLURAL = "idallocations"
# The one object every daemon reads and writes.
NAME = "namespaces"


@dataclass(frozen=True, slots=True)
class Allocation:
    """What the object says: the slot of each namespace, as of `resource_version`."""

    slots: Mapping[str, Slot] = field(default_factory=dict)
    resource_version: str = ""
    # Entries that did not parse, as written: kept on every write, their slots taken.
    unreadable: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Claim:
    """The outcome of `claim`: the new slots, and the namespaces that got none."""

    slots: dict[str, Slot]
    exhausted: list[str]


def read(obj: Mapping[str, Any] | None) -> Allocation:
    """The allocation in `obj` (None: no object yet, an empty allocation)."""
    if obj is None:
        return Allocation()
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    entries = spec.get("namespaces") if isinstance(spec, dict) else None
    slots: dict[str, Slot] = {}
    unreadable: dict[str, Any] = {}
    for namespace, entry in (entries if isinstance(entries, dict) else {}).items():
        slot = _slot(entry)
        if slot is None:
            unreadable[namespace] = entry
        else:
            slots[namespace] = slot
    return Allocation(slots, str(meta.get("resourceVersion") or ""), unreadable)


def _slot(entry: Any) -> Slot | None:
    if not isinstance(entry, dict):
        return None
    vni_slot, wire_slot = entry.get("vniSlot"), entry.get("wireSlot")
    for value in (vni_slot, wire_slot):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return None
    assert isinstance(vni_slot, int) and isinstance(wire_slot, int)
    return Slot(vni_slot, wire_slot)


def render(allocation: Allocation, slots: Mapping[str, Slot]) -> dict[str, Any]:
    """The object to write: `slots` replacing `allocation`'s, preconditioned on its version."""
    entries: dict[str, Any] = dict(allocation.unreadable)
    for namespace, slot in sorted(slots.items()):
        entries[namespace] = {"vniSlot": slot.vni_slot, "wireSlot": slot.wire_slot}
    metadata: dict[str, Any] = {"name": NAME}
    if allocation.resource_version:
        metadata["resourceVersion"] = allocation.resource_version
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": {"namespaces": entries},
    }


def claim(allocation: Allocation, namespaces: Iterable[str], vni_base: int) -> Claim:
    """Slots for every namespace in `namespaces` that has none, in name order.

    Each gets its `preferred_slot` half by half where that is free, else the
    lowest free one. A namespace that finds no free VNI slot or no free wire
    slot gets neither and is listed in `exhausted`. Namespaces that hold a slot
    keep it unchanged, whatever `vni_base` says.
    """
    slots = dict(allocation.slots)
    taken_vni = {s.vni_slot for s in slots.values()} | _unreadable_taken(allocation, "vniSlot")
    taken_wire = {s.wire_slot for s in slots.values()} | _unreadable_taken(allocation, "wireSlot")
    vni_limit = vni_slots(vni_base)
    exhausted: list[str] = []
    for namespace in sorted(set(namespaces) - slots.keys()):
        preferred = preferred_slot(namespace, vni_base)
        vni_slot = _pick(preferred.vni_slot, taken_vni, vni_limit)
        wire_slot = _pick(preferred.wire_slot, taken_wire, WIRE_SLOTS)
        if vni_slot is None or wire_slot is None:
            exhausted.append(namespace)
            continue
        slots[namespace] = Slot(vni_slot, wire_slot)
        taken_vni.add(vni_slot)
        taken_wire.add(wire_slot)
    return Claim(slots, exhausted)


def release(allocation: Allocation, namespaces: Iterable[str]) -> dict[str, Slot]:
    """The slots without those of `namespaces` (freed for any namespace to claim)."""
    gone = set(namespaces)
    return {ns: slot for ns, slot in allocation.slots.items() if ns not in gone}


def exhausted_message(namespace: str, vni_base: int, held: int) -> str:
    """Why `namespace` has no ids: what the link's status and /links say."""
    return (
        f"namespace {namespace} has no VNI and wire id slot: the {held} namespaces in "
        f"{PLURAL}.{GROUP}/{NAME} hold all {min(vni_slots(vni_base), WIRE_SLOTS)} "
        f"(vxlan.vni_base {vni_base}); a slot is freed when its namespace has no Topology left"
    )


def _pick(preferred: int, taken: set[int], limit: int) -> int | None:
    if 0 <= preferred < limit and preferred not in taken:
        return preferred
    return next((slot for slot in range(limit) if slot not in taken), None)


def _unreadable_taken(allocation: Allocation, key: str) -> set[int]:
    out: set[int] = set()
    for entry in allocation.unreadable.values():
        value = entry.get(key) if isinstance(entry, dict) else None
        if isinstance(value, int) and not isinstance(value, bool):
            out.add(value)
    return out
