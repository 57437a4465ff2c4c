"""The link reconciler: makes the kernel equal to the `links` table, key by key.

What a caller may rely on:

- Every change to a row (insert, update, delete) queues its key; the queue
  coalesces (a first change at once, later ones behind a short quiet) and
  never runs one key twice at once. A delete always waits the quiet
  (`reconcile.debounce`): a row back by then is updated, never torn down. A
  row new to this process, or back from a delete, is taken at once even
  within the quiet: there is nothing to coalesce it with.
- A row is realised by `driver.update(row)`, which reads the kernel back and
  repairs whatever differs; a deleted row by `driver.delete(old_row, keep)`,
  where deleting what does not exist is success and `keep` holds the pod ends
  a current row of the same link wants (the link changed kind: a pod end is
  never deleted for a row that takes it over, even one that cannot be built,
  so it stays without carrier). When a row's ends move (new netns,
  new name) the old ends are cleared first (`driver.move`). What is cleared or
  deleted is what this process last handed to the driver, which is not always
  the row's last state: changes between two looks are coalesced, so a row can
  move and go away before it is looked at, and the place it moved to was never
  built.
- A `LinkError` is retried with per-key backoff (100 ms doubling to 60 s); a
  `SpecError` is recorded and waits for a change or the next full pass. Every
  failure is in the row's health; nothing is dropped.
- Each pass's verdict is written to the row's health in the table
  (`LinksTable.set_health`): done, or error with its message, attempts and
  whether a retry may help; pending again when `verify` asks for a check. A
  verdict on a row that changed during its pass is not written: the row is
  pending (the table made it so) and its next pass is queued.
- `initial_done` is set once the table was initialized and every row that
  existed at that moment has been attempted once (success or recorded error).
  Pruning waits for it (`prune.py`), so a transient failure at start can never
  delete a valid link.
- After `close()`, no driver call starts; one in flight finishes.
- Driver calls run in a thread pool: netlink (pyroute2) must not run on the
  event loop, which may be uvloop. Keys whose rows share a netns run one at a
  time (`lanes.py`: the kernel serializes them anyway); keys in different
  namespaces run in parallel, `concurrency` at most in the driver. Keys waiting
  for a running key's namespaces, and touching no other, go to the pool with
  it, up to BATCH in one trip: each key's calls still stop at its own failure,
  and its health, duration and retry are its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from meshwire.control.common.queue import WorkQueue
from meshwire.control.links.driver import LinkDriver
from meshwire.control.links.driver_errors import SpecError
from meshwire.control.links.netns import CURRENT
from meshwire.control.links.podend import node_interfaces
from meshwire.control.reconcile.lanes import Lanes
from meshwire.control.tables.health import Health, State
from meshwire.control.tables.links import LinkRow, LinksTable

log = logging.getLogger(__name__)

# The node's netns (the daemon's own), where the pod ends' node sides and the
# transports are, as `ends_wanted` names it for pruning.
NODE_NETNS = CURRENT
# Keys reconciled concurrently; each holds one pool thread while in the driver.
DEFAULT_CONCURRENCY = 4
# Keys of one lane taken into one trip to the pool: a trip costs two thread
# wake-ups, as much as a veth row's own Python; a key's verdict waits for the rest
# of its batch, about a millisecond a row.
BATCH = 16


@dataclass(slots=True)
class _Pass:
    """One pass over a key: the driver calls planned on the loop, their outcome and
    times (its own calls', not its batch's) filled in by the pool thread."""

    key: str
    row: LinkRow | None
    # The table's revision of `row` (0 for none): a verdict is written only on it.
    revision: int = 0
    calls: list[tuple[Callable[..., None], tuple[object, ...]]] = field(default_factory=list)
    # The first call clears the ends of a row that moved (`driver.move`).
    moves: bool = False
    # Calls that returned, the exception of the one that raised; when the first
    # started and the last ended (time.monotonic()).
    made: int = 0
    error: Exception | None = None
    started: float = 0.0
    ended: float = 0.0


def _site(row: LinkRow) -> tuple[str, tuple[tuple[str, str], ...]]:
    """What identifies a realised link in the kernel: its kind and where its ends are."""
    return row.kind, tuple((end.netns, end.intf) for end in row.ends())


class LinkReconciler:
    def __init__(
        self,
        links: LinksTable,
        driver: LinkDriver,
        queue: WorkQueue,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        on_duration: Callable[[str, float, bool], None] | None = None,
    ) -> None:
        self.links = links
        self.driver = driver
        self.queue = queue
        self.concurrency = concurrency
        self.initial_done = asyncio.Event()
        self._on_duration = on_duration
        # Rows as last handed to `driver.update` (realised, or partly if it
        # failed), to know what to clear when a row's ends move or the row goes
        # away. Lost on restart; pruning covers what it misses.
        self._realised: dict[str, LinkRow] = {}
        # Deleted rows not yet torn down (the table no longer has them): what is
        # deleted when nothing was realised by this process (a restart).
        self._deleted: dict[str, LinkRow] = {}
        # key -> (start, end) on time.monotonic() of the row's last update pass,
        # driver calls included, success or not (`pass_span`).
        self._passes: dict[str, tuple[float, float]] = {}
        # The rows of the table when it was initialized that have not been
        # attempted yet (still PENDING) and are still in it; None before then.
        # Only shrinks: a key leaves it at its first verdict or when
        # its row is deleted (O(1) each, whatever the table's size).
        self._initial: set[str] | None = None
        self._closed = False
        # Set by hold(): keys are still taken from the queue, and left as they are.
        self._held = False
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="netlink")
        self._tracker = links.track()
        self._lanes = Lanes()
        # Runs of parked keys started when a key released more than one lane.
        self._runs: set[asyncio.Task[None]] = set()

    # -- loop -----------------------------------------------------------------

    async def run(self) -> None:
        """Feed the queue from table changes and run the workers until closed."""
        workers = [asyncio.create_task(self._worker()) for _ in range(self.concurrency)]
        initial = asyncio.create_task(self._track_initial())
        try:
            while not self._closed:
                self._intake()
                await self._tracker.wait()
        finally:
            initial.cancel()
            self.queue.shutdown()
            await asyncio.gather(initial, *workers, return_exceptions=True)
            await asyncio.gather(*self._runs, return_exceptions=True)

    async def _track_initial(self) -> None:
        await self.links.wait_initialized()
        self._initial = {key for key in self.links if self.links.health(key).state is State.PENDING}
        self._check_initial()

    def _intake(self) -> None:
        for change in self._tracker.next():
            if change.deleted:
                self._deleted[change.key] = change.obj
                if self._initial is not None:
                    self._initial.discard(change.key)
                # A delete waits out the queue's quiet: a row that leaves and
                # comes back meanwhile (two Topology objects edited one after
                # the other, whose ends disagree in between; a pod's DEL and
                # ADD) is updated in place, not torn down and built again.
                self.queue.add_after(change.key, self.queue.debounce)
            else:
                back = self._deleted.pop(change.key, None) is not None
                if back or change.key not in self._realised:
                    # A row new, or back from a delete (a pod's DEL then ADD):
                    # no earlier pass to coalesce with, whatever the quiet says.
                    self.queue.add_after(change.key, 0)
                else:
                    self.queue.add(change.key)
        # A row of the initial set that left the table is no longer waited for.
        self._check_initial()

    def verify(self, keys: Iterable[str]) -> None:
        """Check these rows against the kernel again; pending until that is done."""
        for key in sorted(keys):
            entry = self.links.row(key)
            if entry is not None:
                self._set_health(key, entry.revision, self.links.health(key).pending())
                self.queue.add(key)

    def verify_all(self) -> None:
        """Queue every row for a check against the kernel (the full pass)."""
        for key in self.links:
            self.queue.add(key)

    async def _worker(self) -> None:
        while (key := await self.queue.get()) is not None:
            if self._lanes.claim(key, self._lanes_of(key)):
                await self._run(key)

    async def _run(self, key: str | None) -> None:
        """Reconcile `key` (its lanes claimed) with the keys parked behind it that touch
        only its namespaces (at most BATCH in all, one driver call); then the keys
        parked behind its lanes that can claim theirs now: the first here, any other
        in a run of its own."""
        while key is not None:
            batch = [key, *self._lanes.follow(key, self._lanes_of, BATCH - 1)]
            try:
                await self._reconcile(batch)
            finally:
                for each in batch:
                    self.queue.done(each)
                ready = self._lanes.release(key, self._lanes_of)
            key = ready[0] if ready else None
            for other in ready[1:]:
                run = asyncio.create_task(self._run(other))
                self._runs.add(run)
                run.add_done_callback(self._runs.discard)

    def _lanes_of(self, key: str) -> set[str]:
        """The lanes a pass over `key` takes: the namespaces it may touch (its row's, and
        those of the row last realised or deleted: what a move or a delete clears), and
        its pods' (`pod:NS/POD`). A pod end's node side is named by its pod and
        interface, not its netns, so two rows of one pod end in two netns (before and
        after its pod moved, a detached row and the veth that replaces it) share it
        and must not run at once."""
        rows = [row for row in (self.links.get(key), self._realised.get(key),
                                self._deleted.get(key)) if row is not None]  # fmt: skip
        netns = {end.netns for row in rows for end in row.ends()}
        return netns | {f"pod:{row.namespace}/{end.pod}" for row in rows for end in row.ends()}

    async def _reconcile(self, keys: list[str]) -> None:
        """One pass over each of `keys`, their driver calls in one trip to the pool:
        a key's calls run in order and stop at its first failure."""
        passes = [each for key in keys if (each := self._plan(key)) is not None]
        if passes:
            await asyncio.get_running_loop().run_in_executor(self._pool, self._drive, passes)
            for each in passes:
                self._finish(each)

    def _plan(self, key: str) -> _Pass | None:
        """The driver calls a pass over `key` makes; None once closed or held."""
        if self._closed or self._held:
            return None
        entry = self.links.row(key)
        row = entry.obj if entry is not None else None
        done = _Pass(key, row, entry.revision if entry is not None else 0)
        if row is None:
            # Popped only once the delete succeeded: a failed delete is retried.
            old = self._realised.get(key) or self._deleted.get(key)
            if old is not None:
                log.debug("link %s: delete %s in %s", key, old.kind.value, old.local.netns)
                done.calls.append((self.driver.delete, (old, self._taken_over(old))))
            return done
        previous = self._realised.get(key)
        if previous is not None and _site(previous) != _site(row):
            log.debug(
                "link %s: clear %s in %s (moved)", key, previous.kind.value, previous.local.netns
            )
            done.calls.append((self.driver.move, (previous, row)))
            done.moves = True
        log.debug("link %s: update %s in %s", key, row.kind.value, row.local.netns)
        done.calls.append((self.driver.update, (row,)))
        return done

    def _taken_over(self, old: LinkRow) -> set[tuple[str, str]]:
        """The pod ends (netns, interface) of the deleted row `old` that a current row of
        its link wants (a row of another kind took the link over): its delete leaves
        them, whether or not that row could be built yet."""
        link = f"{old.namespace}/{old.uid}"
        keys = {link, *(f"{link}/{end.pod}" for end in old.ends())}
        wanted = {
            (end.netns, end.intf)
            for key in keys
            if (row := self.links.get(key)) is not None
            for end in row.ends()
        }
        return wanted & {(end.netns, end.intf) for end in old.ends()}

    def _drive(self, passes: list[_Pass]) -> None:
        """In a pool thread: each pass's calls, until one fails; none starts once closed
        or held (what it would have done is left as it is)."""
        for each in passes:
            each.started = time.monotonic()
            for method, args in each.calls:
                if self._closed or self._held:
                    break
                try:
                    method(*args)
                except Exception as exc:  # every failure is recorded and retried
                    each.error = exc
                    break
                each.made += 1
            each.ended = time.monotonic()

    def _finish(self, done: _Pass) -> None:
        key, row = done.key, done.row
        if row is None:
            if done.error is None:
                self._deleted.pop(key, None)
                self._realised.pop(key, None)
                self._passes.pop(key, None)
                self.queue.forget(key)
            else:
                self._failed(done, done.error)
            self._record_duration("delete", done, done.error is None)
            return
        # The row counts as handed to the driver once its old ends were cleared.
        if not (done.moves and done.made == 0 and done.error is not None):
            self._realised[key] = row
        self._passes[key] = (done.started, done.ended)
        if done.error is not None:
            self._failed(done, done.error)
            self._record_duration("update", done, False)
            return
        self.queue.forget(key)
        self._set_health(key, done.revision, self.links.health(key).done())
        self._record_duration("update", done, True)

    def _failed(self, done: _Pass, exc: Exception) -> None:
        key, permanent = done.key, isinstance(exc, SpecError)
        if done.row is None:
            log.warning("deleting link %s failed: %s", key, exc)
        else:
            health = self.links.health(key).failed(str(exc), permanent)
            self._set_health(key, done.revision, health)
            log.warning(
                "link %s failed (attempt %d%s): %s",
                key,
                health.attempts,
                ", not retried until it changes" if permanent else "",
                exc,
            )
        if not permanent:
            self.queue.add_rate_limited(key)

    # -- health ---------------------------------------------------------------

    def _set_health(self, key: str, revision: int, health: Health) -> None:
        """Write the health of row `key` if the table's row is still at `revision`."""
        entry = self.links.row(key)
        if entry is None or entry.revision != revision:
            return
        self.links.set_health(key, health)
        if self._initial is not None and health.state is not State.PENDING:
            self._initial.discard(key)
        self._check_initial()

    def _check_initial(self) -> None:
        if self._initial is not None and not self._initial and not self.initial_done.is_set():
            self.initial_done.set()

    def _record_duration(self, op: str, done: _Pass, ok: bool) -> None:
        if self._on_duration is not None:
            self._on_duration(op, done.ended - done.started, ok)

    def pass_span(self, keys: Iterable[str], since: float) -> tuple[float, float] | None:
        """(earliest start, latest end) on time.monotonic() of the last update passes
        over `keys` that started at or after `since`; None if none did."""
        spans = [
            span for key in keys if (span := self._passes.get(key)) is not None and span[0] >= since
        ]
        if not spans:
            return None
        return min(start for start, _ in spans), max(end for _, end in spans)

    def ends_wanted(self) -> set[tuple[str, str]]:
        """(netns, interface) of every interface some row wants, the node's own netns
        named `NODE_NETNS`; pruning keeps these."""
        wanted: set[tuple[str, str]] = set()
        for row in self.links.values():
            wanted |= {(end.netns, end.intf) for end in row.ends()}
            wanted |= {(NODE_NETNS, name) for name in node_interfaces(row)}
        return wanted

    def recheck(self, netns: str, intf: str) -> bool:
        """`verify` the rows that want this end (a prune removed it meanwhile); any?"""
        keys = [
            row.key
            for row in self.links.values()
            if any(end.netns == netns and end.intf == intf for end in row.ends())
            or (netns == NODE_NETNS and intf in node_interfaces(row))
        ]
        self.verify(keys)
        return bool(keys)

    # -- shutdown -------------------------------------------------------------

    def hold(self) -> None:
        """Make no change from now on (meshwire is being removed from the node): every
        link stays as it is, whatever the tables say; `run` goes on, so nothing ends."""
        self._held = True

    @property
    def held(self) -> bool:
        return self._held

    def close(self) -> None:
        """Stop intake and driver calls; in-flight calls finish, links stay up."""
        self._closed = True
        self.queue.shutdown()
        self._tracker.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
