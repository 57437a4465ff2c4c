"""Per-wire frame counters, as the C table keeps them and reports carry them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Counters:
    """tx: read from the wire's TAP towards the peer; rx: written from the peer to the TAP.

    tx_drops counts frames too long for a batch; rx_drops frames the TAP refused
    (queue full or device down). Frames lost in flight on the network are in neither.
    """

    tx_frames: int = 0
    tx_bytes: int = 0
    tx_drops: int = 0
    rx_frames: int = 0
    rx_bytes: int = 0
    rx_drops: int = 0

    def as_list(self) -> list[int]:
        return [
            self.tx_frames,
            self.tx_bytes,
            self.tx_drops,
            self.rx_frames,
            self.rx_bytes,
            self.rx_drops,
        ]

    @classmethod
    def from_list(cls, values: list[int]) -> Counters:
        """Raises ValueError unless `values` is six non-negative integers."""
        if len(values) != 6 or not all(isinstance(v, int) and v >= 0 for v in values):
            raise ValueError(f"counters: expected 6 non-negative integers, got {values!r}")
        return cls(*values)
