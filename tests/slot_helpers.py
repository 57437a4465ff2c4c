"""Id slots for tests that derive links without an API: each namespace has the
slot its name hashes to (what the allocator prefers), so ids are predictable."""

from __future__ import annotations

from meshwire.control.common.ids import Slot, preferred_slot

VNI_BASE = 5000


def slot(namespace: str) -> Slot:
    return preferred_slot(namespace, VNI_BASE)


class HashedSlots:
    """A `SlotSource` in which every namespace already holds its hashed slot."""

    def slot_of(self, namespace: str) -> Slot | str | None:
        return slot(namespace)
