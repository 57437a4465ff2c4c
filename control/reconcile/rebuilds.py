"""Links a change of emulation rebuilt: what a pod's `status.link_rebuilds` says. Pure.

A link that gains its first impairment or cable state, or loses its last, by an
edit of its Topology moves between the kernel's path (veth, vxlan) and the
workers (a grpc row, derive.py), and its interfaces are made again: one carrier
flap. `Rebuilds.observe` compares a pod's rows before and after one derivation
and notes each link of the pod whose `emulated` flag flipped; every other
change (a later impairment, a pull, a move) notes nothing. A link declared
emulated from its creation has no row before, so it is never noted. A link the
pod no longer has a row for drops its note.

Notes are per pod (`ns/name`), the latest per link; `take_changed` hands the
caller the pods whose note text changed since it last asked, and `note(pod)` is
that text ("" when none), which the daemon writes to the pod's Topology status.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from meshwire.control.tables.links import LinkRow


@dataclass(frozen=True, slots=True)
class Rebuild:
    uid: int
    intf: str
    # True: moved onto the workers (its emulation began); False: back onto the kernel's path.
    emulated: bool
    # Wall-clock seconds (time.time) of the derivation that moved it.
    at: float

    def text(self) -> str:
        when = datetime.fromtimestamp(self.at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        way = (
            "onto the workers as its emulation began"
            if self.emulated
            else "back onto the kernel's path as its emulation ended"
        )
        return f"link {self.uid} ({self.intf}): rebuilt {way} at {when}, one carrier flap"


def _by_end(rows: Iterable[LinkRow]) -> dict[tuple[str, int], tuple[LinkRow, str]]:
    """(pod key, uid) -> (row, the pod's interface) for every end a row realises here."""
    out: dict[tuple[str, int], tuple[LinkRow, str]] = {}
    for row in rows:
        for end in row.ends():
            out[(f"{row.namespace}/{end.pod}", row.uid)] = (row, end.intf)
    return out


class Rebuilds:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        # Pod key -> uid -> its latest rebuild. Only pods with a note are present.
        self._notes: dict[str, dict[int, Rebuild]] = {}
        # Pods whose note changed since `take_changed`.
        self._changed: set[str] = set()

    def observe(
        self, pods: Iterable[str], before: Iterable[LinkRow], after: Iterable[LinkRow]
    ) -> None:
        """`before`: the rows `pods` had before a derivation; `after`: the rows it derived."""
        old, new = _by_end(before), _by_end(after)
        now = self._clock()
        for pod in pods:
            notes = self._notes.get(pod, {})
            kept = {uid: note for uid, note in notes.items() if (pod, uid) in new}
            for (owner, uid), (row, intf) in new.items():
                previous = old.get((owner, uid))
                if owner == pod and previous is not None and previous[0].emulated != row.emulated:
                    kept[uid] = Rebuild(uid, intf, row.emulated, now)
            if kept == notes:
                continue
            self._changed.add(pod)
            if kept:
                self._notes[pod] = kept
            else:
                self._notes.pop(pod, None)

    def note(self, pod: str) -> str:
        notes = self._notes.get(pod, {})
        return "; ".join(notes[uid].text() for uid in sorted(notes))

    def take_changed(self) -> set[str]:
        changed, self._changed = self._changed, set()
        return changed
