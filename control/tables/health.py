"""The health of a node's links: one `Health` per link row, one `Findings` per pod.

Three parties write it, each its own part, and nothing else keeps it:

- derivation (reconcile/desired.py): a pod's `Findings`, the links it made no
  row for (invalid, or due but waiting for their namespace's id slot); and a
  row it writes again is pending (the links table does that on every upsert);
- the reconciler: a row's `state`, `message`, `attempts` and `permanent`, after
  each pass, and pending when it checks a row again;
- the wire manager: a grpc row's `handshake`, its wire's last handshake problem.

Whoever must be told of a change (the `plumbing_error` publisher, a waiting CNI
ADD) watches the links table (`LinksTable.watch_health`); a pod's health is
read as a whole by `daemon/plumbing_error.py` (`pod_errors`).
"""

from __future__ import annotations

from collections.abc import Callable, Set
from dataclasses import dataclass
from enum import StrEnum


class State(StrEnum):
    PENDING = "pending"
    DONE = "done"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Health:
    """A link row's health: the reconciler's verdict, pending until it made one, and
    the handshake problem of the row's wire ("" for none, and for rows without a
    wire). A far end that is simply not realised yet is not a handshake problem."""

    state: State = State.PENDING
    message: str = ""
    # Failed attempts since the row was last pending or done.
    attempts: int = 0
    # True when retrying cannot help (a bad spec, a name taken by a foreign
    # interface): the row waits for a change or the next full pass.
    permanent: bool = False
    handshake: str = ""

    def pending(self) -> Health:
        return Health(handshake=self.handshake)

    def done(self) -> Health:
        return Health(State.DONE, handshake=self.handshake)

    def failed(self, message: str, permanent: bool) -> Health:
        return Health(State.ERROR, message, self.attempts + 1, permanent, self.handshake)

    def with_handshake(self, problem: str) -> Health:
        return Health(self.state, self.message, self.attempts, self.permanent, problem)

    @property
    def converging(self) -> bool:
        """Whether the reconciler has yet to realise the row, or may still: pending, or
        failed with an error a retry may fix."""
        return self.state is State.PENDING or (self.state is State.ERROR and not self.permanent)

    def errors_may_differ(self, other: Health) -> bool:
        """Whether a pod's error messages may differ between this and `other`: either is
        an error, or their handshake problems differ."""
        return State.ERROR in (self.state, other.state) or self.handshake != other.handshake


PENDING = Health()


@dataclass(frozen=True, slots=True)
class Findings:
    """What derivation found about a pod's links that got no row: the problems of
    links it cannot build (invalid, ends that disagree), in derivation's order, and
    whether a link is due but waits for its namespace's id slot."""

    problems: tuple[str, ...] = ()
    waiting_for_slot: bool = False


NOTHING_FOUND = Findings()

# Called with the local pods (`ns/pod`) whose links' health a write touched, and
# whether it may change their error messages.
HealthWatcher = Callable[[Set[str], bool], None]
