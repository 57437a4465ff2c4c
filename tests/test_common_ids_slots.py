"""Namespace slots: every id unique by construction, the hashed slot kept when free.

Pure: the slot layout (`ids.py`) and the allocation steps (`slots.py`), no API.
"""

from __future__ import annotations

import itertools
import zlib

import pytest

from meshwire.control.common import slots
from meshwire.control.common.ids import (
    UID_LIMIT,
    VNI_MAX,
    WIRE_SLOTS,
    IdError,
    Slot,
    far_end,
    preferred_slot,
    vni,
    vni_slots,
    wire_id,
)

BASE = 5000


def allocate(namespaces: list[str], start: slots.Allocation | None = None) -> dict[str, Slot]:
    result = slots.claim(start or slots.Allocation(), namespaces, BASE)
    assert result.exhausted == []
    return result.slots


def hash_vni(namespace: str, uid: int) -> int:
    """What meshwire derived before the allocation: crc32 of the name, modulo the slots."""
    return BASE + (zlib.crc32(namespace.encode()) % vni_slots(BASE)) * UID_LIMIT + uid


def hash_wire(namespace: str, uid: int) -> int:
    return ((zlib.crc32(namespace.encode()) % WIRE_SLOTS) * UID_LIMIT + uid) << 1


def clashing_pairs(ids: dict[str, int]) -> int:
    seen: dict[int, str] = {}
    clashes = 0
    for namespace, id_ in ids.items():
        if id_ in seen:
            clashes += 1
        seen[id_] = namespace
    return clashes


def test_1000_namespaces_by_16_uids_get_distinct_vnis_and_wire_ids() -> None:
    namespaces = [f"kne-lab-{i}" for i in range(1000)]
    held = allocate(namespaces)
    vnis: set[int] = set()
    wires: set[int] = set()
    for namespace, uid in itertools.product(namespaces, range(1, 17)):
        slot = held[namespace]
        vnis.add(vni(slot, uid, BASE))
        a, b = wire_id(slot, uid, "r1", "r2"), wire_id(slot, uid, "r2", "r1")
        assert far_end(a) == b and far_end(b) == a
        wires |= {a, b}
    assert len(vnis) == 16_000
    assert len(wires) == 32_000
    assert max(vnis) <= VNI_MAX
    assert max(wires) < 1 << 32


def test_the_same_names_clash_under_the_old_hash() -> None:
    """What the allocation fixes: 100 names give VNI and wire-id clashes under crc32."""
    namespaces = [f"kne-lab-{i}" for i in range(100)]
    assert clashing_pairs({ns: hash_vni(ns, 1) for ns in namespaces}) == 5
    assert clashing_pairs({ns: hash_wire(ns, 1) for ns in namespaces}) == 4
    assert hash_vni("lab25", 1) == hash_vni("lab26", 1)
    held = allocate(namespaces)
    assert clashing_pairs({ns: vni(held[ns], 1, BASE) for ns in namespaces}) == 0
    assert clashing_pairs({ns: wire_id(held[ns], 1, "a", "b") for ns in namespaces}) == 0


def test_a_namespace_gets_the_slot_the_old_hash_gave_it_when_that_is_free() -> None:
    held = allocate(["lab25", "lab7", "kne-lab-3"])
    for namespace, slot in held.items():
        assert slot == preferred_slot(namespace, BASE)
        assert vni(slot, 9, BASE) == hash_vni(namespace, 9)
        assert wire_id(slot, 9, "a", "b") == hash_wire(namespace, 9)


def test_of_two_names_that_hash_alike_the_first_keeps_its_ids_and_the_other_moves() -> None:
    held = allocate(["lab26", "lab25"])
    assert held["lab25"] == preferred_slot("lab25", BASE)
    assert held["lab26"].vni_slot != held["lab25"].vni_slot


def test_slots_held_stay_whoever_claims_next() -> None:
    first = slots.Allocation(allocate(["a", "b"]), "7")
    after = allocate(["c", "a"], first)
    assert {ns: after[ns] for ns in ("a", "b")} == dict(first.slots)


def test_a_released_slot_goes_to_the_next_claim() -> None:
    held = allocate([f"ns{i}" for i in range(vni_slots(BASE))])
    freed = held["ns5"]
    kept = slots.release(slots.Allocation(held), ["ns5"])
    result = slots.claim(slots.Allocation(kept), ["new"], BASE)
    assert result.slots["new"].vni_slot == freed.vni_slot


def test_exhaustion_gives_no_slot_and_keeps_every_held_one() -> None:
    full = slots.Allocation(allocate([f"ns{i}" for i in range(vni_slots(BASE))]))
    result = slots.claim(full, ["one-too-many"], BASE)
    assert result.exhausted == ["one-too-many"]
    assert result.slots == dict(full.slots)
    message = slots.exhausted_message("one-too-many", BASE, len(result.slots))
    assert "namespace one-too-many has no VNI and wire id slot" in message
    assert "all 1023" in message and "idallocations.meshwire.dev/namespaces" in message


def test_an_unreadable_entry_is_kept_and_its_slots_are_not_handed_out() -> None:
    wanted = preferred_slot("x", BASE)
    obj = slots.render(slots.Allocation(), {})
    obj["spec"]["namespaces"]["odd"] = {"vniSlot": wanted.vni_slot, "wireSlot": "seven"}
    allocation = slots.read(obj)
    assert allocation.slots == {}
    result = slots.claim(allocation, ["x"], BASE)
    assert result.slots["x"].vni_slot != wanted.vni_slot
    assert slots.render(allocation, result.slots)["spec"]["namespaces"]["odd"] == {
        "vniSlot": wanted.vni_slot,
        "wireSlot": "seven",
    }


def test_the_object_reads_back_what_was_rendered_with_its_precondition() -> None:
    held = allocate(["a", "b"])
    obj = slots.render(slots.Allocation(resource_version="12"), held)
    assert obj["metadata"] == {"name": "namespaces", "resourceVersion": "12"}
    obj["metadata"]["resourceVersion"] = "13"
    assert slots.read(obj) == slots.Allocation(held, "13")


@pytest.mark.parametrize("uid", [0, UID_LIMIT])
def test_a_uid_outside_the_slot_has_no_id(uid: int) -> None:
    with pytest.raises(IdError, match=f"uid {uid}"):
        vni(Slot(0, 0), uid, BASE)
    with pytest.raises(IdError, match=f"uid {uid}"):
        wire_id(Slot(0, 0), uid, "a", "b")


def test_a_vni_slot_past_what_the_base_leaves_has_no_vni() -> None:
    with pytest.raises(IdError, match="VNI slot 1023 is past the 1023 slots"):
        vni(Slot(1023, 0), 1, BASE)
