"""Link emulation in the model: a link end's impairments and its cable state.

Both are meshwire's own optional fields of a link entry (meshnet ignores them):

- `impairments`: what happens to the frames this end SENDS, so each direction
  of a link is set on its own end. `delay_ms` with `jitter_ms` (uniform in
  delay ± jitter, never below 0), `loss_pct`, `corrupt_pct` (one bit flipped
  in the frame's payload), `duplicate_pct`, `reorder_pct` (the frame skips
  the delay queue and overtakes the frames delayed before it) and `rate_mbps`
  (a token bucket; 0 or absent: no limit). All default to 0, nothing.
- `state`: `up` (the default) or `down`. `down` on either end pulls the cable:
  both interfaces stay admin-up without carrier and no frame passes.

On clusters whose Topology CRD prunes unknown fields (KNE's, upstream
meshnet's) the same can be set in the object's annotation
`meshwire.dev/emulation`, a JSON object keyed by `local_intf`:

    meshwire.dev/emulation: '{"eth1": {"state": "down", "impairments": {"delay_ms": 20}}}'

An interface named there takes the annotation's `impairments` and `state`
instead of its link entry's; the others keep theirs.

`Impairments.from_dict` only reads the shape (numbers); `problems` checks the
ranges, so a bad value makes the link a problem naming object, link and field
(validate.py) while the pod's other links still work.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

from meshwire.base.impairments import Params

ANNOTATION = "meshwire.dev/emulation"
STATES = ("up", "down")

# Bounds, with the reason: a minute of delay is past any protocol timer a lab
# tests; 1,000,000 Mbit/s (1 Tbit/s) is past what a worker moves, so a larger
# rate is a typo.
MAX_DELAY_MS = 60_000.0
MAX_RATE_MBPS = 1_000_000.0


class EmulationError(ValueError):
    """A field whose shape cannot be read; the message names it (the caller adds where)."""


@dataclass(frozen=True, slots=True)
class Impairments(Params):
    """A link end's impairments as the topology gives them: the fields the workers'
    emulator takes (base/impairments.Params, the one list of them), read and
    written as a user does. Falsy when nothing is set."""

    def to_dict(self) -> dict[str, float]:
        """The fields set (non-zero), ints where they are whole, as a user wrote them."""
        out: dict[str, float] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value:
                out[f.name] = int(value) if float(value).is_integer() else value
        return out

    def replace(self, **changes: float) -> Impairments:
        return Impairments(**(self.to_dict() | changes))

    @classmethod
    def from_dict(cls, raw: Any) -> Impairments:
        """Reads a mapping of numbers; raises EmulationError naming the field."""
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise EmulationError(f"impairments: expected a mapping, got {type(raw).__name__}")
        known = {f.name for f in fields(cls)}
        values: dict[str, float] = {}
        for name, value in raw.items():
            if name not in known:
                raise EmulationError(
                    f"impairments.{name}: unknown field (known: {', '.join(sorted(known))})"
                )
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise EmulationError(f"impairments.{name}: expected a number, got {value!r}")
            values[name] = float(value)
        return cls(**values)


def problems(impairments: Impairments) -> list[tuple[str, str]]:
    """(field, message) for each value out of range; [] if all are fine."""
    out: list[tuple[str, str]] = []

    def bad(name: str, message: str) -> None:
        out.append((f"impairments.{name}", message))

    for f in fields(impairments):
        value = getattr(impairments, f.name)
        if value != value:  # NaN
            bad(f.name, "is not a number")
        elif value < 0:
            bad(f.name, f"{value:g} is negative")
        elif f.name.endswith("_pct") and value > 100:
            bad(f.name, f"{value:g} is out of range 0..100")
    if impairments.delay_ms > MAX_DELAY_MS:
        bad("delay_ms", f"{impairments.delay_ms:g} is out of range 0..{MAX_DELAY_MS:g}")
    if impairments.jitter_ms > impairments.delay_ms:
        bad(
            "jitter_ms",
            f"{impairments.jitter_ms:g} is larger than delay_ms {impairments.delay_ms:g} "
            "(a frame cannot leave before it was sent)",
        )
    if impairments.rate_mbps > MAX_RATE_MBPS:
        bad("rate_mbps", f"{impairments.rate_mbps:g} is out of range 0..{MAX_RATE_MBPS:g}")
    return out


def state_problem(state: str) -> str | None:
    if state and state not in STATES:
        return f"{state!r} is not one of {', '.join(STATES)}"
    return None


@dataclass(frozen=True, slots=True)
class EndEmulation:
    """One interface's entry of the annotation: None where the entry does not say."""

    impairments: Impairments | None = None
    state: str | None = None


def read_annotation(text: Any) -> dict[str, EndEmulation]:
    """The annotation's entries by interface; raises EmulationError naming what is wrong."""
    if text is None or text == "":
        return {}
    if not isinstance(text, str):
        raise EmulationError(f"annotation {ANNOTATION}: expected a JSON string")
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise EmulationError(f"annotation {ANNOTATION}: not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise EmulationError(f"annotation {ANNOTATION}: expected a JSON object keyed by interface")
    out: dict[str, EndEmulation] = {}
    for intf, entry in raw.items():
        where = f"annotation {ANNOTATION}: {intf}"
        if not isinstance(entry, dict):
            raise EmulationError(f"{where}: expected an object")
        unknown = set(entry) - {"impairments", "state"}
        if unknown:
            raise EmulationError(f"{where}: unknown field {sorted(unknown)[0]!r}")
        state = entry.get("state")
        if state is not None and not isinstance(state, str):
            raise EmulationError(f"{where}: state: expected a string, got {state!r}")
        try:
            impairments = (
                Impairments.from_dict(entry["impairments"]) if "impairments" in entry else None
            )
        except EmulationError as exc:
            raise EmulationError(f"{where}: {exc}") from None
        out[intf] = EndEmulation(impairments, state)
    return out
