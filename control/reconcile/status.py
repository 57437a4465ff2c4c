"""The reconcile status of a link row: pending, done, or error with its message.

Kept beside the links table rather than in it, so recording a status never
looks like a change of desired state to the table's trackers.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class State(StrEnum):
    PENDING = "pending"
    DONE = "done"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class LinkStatus:
    state: State = State.PENDING
    message: str = ""
    # Failed attempts since the last success.
    attempts: int = 0
    # True when retrying cannot help (a bad spec, a name taken by a foreign
    # interface): the row waits for a change or the next full pass.
    permanent: bool = False

    def done(self) -> LinkStatus:
        return LinkStatus(State.DONE)

    def failed(self, message: str, permanent: bool) -> LinkStatus:
        return LinkStatus(State.ERROR, message, self.attempts + 1, permanent)
