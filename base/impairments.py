"""The one list of a link end's impairments, shared by the topology model
(control/model/emulation.py) and the workers' emulator (dataplane/emulator.py). Plain
data: importing it loads no C extension."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True)
class Params:
    """A link end's impairments as the worker receives them (the fields of
    control/model/emulation.py)."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0
    corrupt_pct: float = 0.0
    duplicate_pct: float = 0.0
    reorder_pct: float = 0.0
    rate_mbps: float = 0.0

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def to_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name)}
