"""Per-wire frame counters, as the C table keeps them and reports carry them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Counters:
    """tx: read from the wire's TAP towards the peer; rx: written from the peer to the TAP.

    tx_drops counts frames too long for a batch; rx_drops frames the TAP refused
    (queue full or device down). Frames lost in flight on the network are in neither.

    The `impaired_*` counters are an impaired wire's emulator's (dataplane/emulator.py),
    of the frames read from its TAP: dropped on purpose (loss), delayed, corrupted,
    duplicated, reordered, and dropped by a full queue (the rate's tail drop
    included); all zero for a wire without impairments.
    """

    tx_frames: int = 0
    tx_bytes: int = 0
    tx_drops: int = 0
    rx_frames: int = 0
    rx_bytes: int = 0
    rx_drops: int = 0
    impaired_dropped: int = 0
    impaired_delayed: int = 0
    impaired_corrupted: int = 0
    impaired_duplicated: int = 0
    impaired_reordered: int = 0
    impaired_overflow: int = 0

    def as_list(self) -> list[int]:
        return [getattr(self, name) for name in FIELDS]

    @classmethod
    def from_list(cls, values: list[int]) -> Counters:
        """Raises ValueError unless `values` is six or twelve non-negative integers
        (the first six alone: no impairments)."""
        if len(values) not in (6, len(FIELDS)) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values
        ):
            raise ValueError(f"counters: expected 6 or 12 non-negative integers, got {values!r}")
        return cls(*values)


FIELDS = tuple(Counters.__dataclass_fields__)
IMPAIRED = tuple(name for name in FIELDS if name.startswith("impaired_"))
