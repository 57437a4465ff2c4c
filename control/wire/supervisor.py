"""The worker supervisor: N dataplane workers, each holding exactly the wires it should.

Wire `w` belongs to worker `(w >> 1) % N` (both ends of a wire have the same
id but for bit 0, so they sit on workers of the same index on their nodes),
which serves on `port_base + index`. The pool is declarative: for every wire
id it was told `changed`, it asks `desired(wire_id)` and brings the worker in
line (AddWire with a duplicate of control's fd, or RemoveWire), one command at
a time per worker, in order. What each worker holds is remembered as
(command, fd generation), so a repeat costs nothing and a new fd is handed
over exactly once.

A worker that exits is started again on the same port (after 100 ms, doubling
to 5 s while it keeps dying) and handed every wire it should hold: frames in
flight are lost, nothing else. Workers are fresh interpreters, never forks of
control (which runs gRPC threads).

With a run directory (`dataplane.run_dir`) the workers outlive control
(non-stop forwarding, dataplane/worker.py): `adopt`, before `start`, takes over
the workers of the last control process still running there (stopping those of
another config and those whose index is no longer used), and hands each wire
they hold to `adopted`, which owns its fd from then on and returns the fd
generation under which it keeps the wire (None: the wire is not wanted, and
the worker is told to drop it). An adopted wire is left as it is until
`changed` names it. `close` then leaves the workers running; without a run
directory it stops them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from meshwire.base import defaults
from meshwire.base.logs import LogFormat
from meshwire.control.common.config import DataplaneConfig, LogConfig, default
from meshwire.control.common.retries import Backoff, BackoffPolicy
from meshwire.control.wire.manager import Desired
from meshwire.dataplane import rundir
from meshwire.dataplane.counters import Counters
from meshwire.dataplane.handle import WorkerError, WorkerHandle
from meshwire.dataplane.messages import AddWire, StreamState
from meshwire.dataplane.worker import WorkerConfig

log = logging.getLogger(__name__)

# A worker is restarted after 100 ms doubling to 5 s; one that lived 10 s has its
# restart backoff reset. A refused sync is retried on the same policy.
RESTART = BackoffPolicy(initial=0.1, maximum=5.0, reset_after=10.0)


@dataclass(frozen=True, slots=True)
class PoolSettings:
    count: int
    listen_host: str
    port_base: int
    batch_frames: int = default(DataplaneConfig, "batch_frames")
    report_interval: float = defaults.REPORT_INTERVAL
    # Netns the workers serve in; empty: control's own (the node's).
    netns: str = ""
    # How workers log (the daemon's `log` section) and the node they name.
    log_level: str = default(LogConfig, "level")
    log_format: LogFormat = defaults.LOG_FORMAT
    node: str = ""
    # The workers' wire key file (config `auth.wire_key`); empty: streams unauthenticated.
    wire_key: str = ""
    # With a wire key: whether opened streams encrypt their records (`auth.wire_encrypt`),
    # and the preface's deadline (`auth.wire_preface_timeout`).
    wire_encrypt: bool = True
    preface_timeout: float = 2.0
    # Config `dataplane.run_dir`, `cgroup_root`, `worker_cgroup`, `orphan_grace`
    # (dataplane/worker.py); empty run_dir: the workers stop with control.
    run_dir: str = ""
    cgroup_root: str = default(DataplaneConfig, "cgroup_root")
    cgroup: str = ""
    orphan_grace: float = default(DataplaneConfig, "orphan_grace")


@dataclass(eq=False)
class _Slot:
    index: int
    handle: WorkerHandle | None = None
    # wire id -> (command, fd generation) the worker holds.
    sent: dict[int, tuple[AddWire, int]] = field(default_factory=dict)
    # Wire ids whose desired state may differ from `sent`.
    dirty: set[int] = field(default_factory=set)
    # Wire ids the worker should hold: resent after a restart.
    known: set[int] = field(default_factory=set)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    # time.monotonic() of the last command sent (reports older than it may lag).
    commanded_at: float = 0.0
    restarts: int = 0
    restart_backoff: Backoff = field(default_factory=lambda: Backoff(RESTART))
    sync_backoff: Backoff = field(default_factory=lambda: Backoff(RESTART))


def _refuse(command: AddWire, fd: int) -> int | None:
    os.close(fd)
    return None


class WorkerPool:
    def __init__(
        self,
        settings: PoolSettings,
        desired: Callable[[int], Desired | None],
        adopted: Callable[[AddWire, int], int | None] = _refuse,
    ) -> None:
        if settings.count < 1:
            raise ValueError(f"workers: need at least one, got {settings.count}")
        self.settings = settings
        self._desired = desired
        self._adopted = adopted
        self._slots = [_Slot(k) for k in range(settings.count)]
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = asyncio.Event()
        # AddWire commands a worker refused (a bug if ever non-zero).
        self.refused = 0

    # -- which worker carries a wire (WorkerSlots) ----------------------------

    def index_of(self, wire_id: int) -> int:
        return (wire_id >> 1) % self.settings.count

    def port_of(self, wire_id: int) -> int:
        return self.settings.port_base + self.index_of(wire_id)

    def changed(self, wire_id: int) -> None:
        slot = self._slots[self.index_of(wire_id)]
        slot.dirty.add(wire_id)
        slot.wake.set()

    # -- life ---------------------------------------------------------------------

    async def adopt(self) -> int:
        """Takes over the workers running in the run directory; returns how many.

        Call before `start`, and before anything calls `changed`."""
        if not self.settings.run_dir:
            return 0
        extra = [k for k in rundir.indexes(self.settings.run_dir) if k >= self.settings.count]
        for index in extra:  # `workers` went down: no slot will take worker k again
            stale = await WorkerHandle.adopt(self._config(_Slot(index)))
            if stale is not None:
                for _, fd in stale.wires:
                    os.close(fd)
                await stale.handle.stop()
        adopted = 0
        for slot in self._slots:
            found = await WorkerHandle.adopt(self._config(slot))
            if found is None:
                continue
            slot.handle = found.handle
            adopted += 1
            for command, fd in found.wires:
                generation = self._adopted(command, fd)
                slot.sent[command.wire_id] = (command, -1 if generation is None else generation)
                if generation is None:
                    slot.dirty.add(command.wire_id)
            log.info(
                "dataplane worker %d: adopted pid %d on port %d with %d wires",
                slot.index,
                found.handle.pid,
                found.handle.data_port,
                len(found.wires),
            )
        return adopted

    async def start(self) -> None:
        """Starts every worker not adopted and waits until each serves; raises WorkerError
        if one cannot. A start that fails stops the workers it started, so it may be
        tried again.
        """
        spawning = [slot for slot in self._slots if slot.handle is None]
        handles = await asyncio.gather(
            *(self._spawn(slot) for slot in spawning), return_exceptions=True
        )
        started = [h for h in handles if isinstance(h, WorkerHandle)]
        failed = [h for h in handles if not isinstance(h, WorkerHandle)]
        if failed:
            await asyncio.gather(*(h.stop() for h in started), return_exceptions=True)
            raise WorkerError(f"dataplane workers did not start: {failed[0]}")
        for slot, handle in zip(spawning, started, strict=True):
            slot.handle = handle
        self._tasks = [
            asyncio.create_task(self._serve(slot), name=f"worker-{slot.index}")
            for slot in self._slots
        ]

    async def close(self) -> None:
        """Stops the workers (SIGTERM), or with a run directory leaves them forwarding for
        the next control process; the TAPs stay either way."""
        self._closing.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        handles = [slot.handle for slot in self._slots if slot.handle is not None]
        if self.settings.run_dir:
            for handle in handles:
                handle.detach()
            return
        await asyncio.gather(*(h.stop() for h in handles), return_exceptions=True)

    # -- observation --------------------------------------------------------------

    def pids(self) -> dict[int, int]:
        """Worker index -> pid of the workers running now."""
        return {slot.index: slot.handle.pid for slot in self._slots if slot.handle is not None}

    def restarts(self) -> int:
        return sum(slot.restarts for slot in self._slots)

    def holds(self, wire_id: int) -> AddWire | None:
        """The command the wire's worker acknowledged last for it; None: it holds none."""
        sent = self._slots[self.index_of(wire_id)].sent.get(wire_id)
        return sent[0] if sent is not None else None

    def held(self) -> int:
        """Wires the workers hold (as far as control has told them)."""
        return sum(len(slot.sent) for slot in self._slots)

    def streams(self) -> list[tuple[int, StreamState]]:
        """(worker, stream) of every outgoing stream in the workers' last reports."""
        out: list[tuple[int, StreamState]] = []
        for slot in self._slots:
            report = slot.handle.streams if slot.handle is not None else None
            if report is not None:
                out.extend((slot.index, stream) for stream in report.streams)
        return out

    def totals(self) -> dict[str, int]:
        """Frames received for unknown wires, malformed batches, incoming streams, connections
        refused by the wire preface, same-node links joined TAP to TAP: all workers."""
        totals: Counter[str] = Counter()
        for slot in self._slots:
            report = slot.handle.streams if slot.handle is not None else None
            if report is not None:
                totals.update(
                    unknown=report.unknown,
                    malformed=report.malformed,
                    incoming=report.incoming,
                    refused=report.refused,
                    pairs=report.pairs,
                )
        return dict(totals)

    def counters(self) -> dict[int, Counters]:
        out: dict[int, Counters] = {}
        for slot in self._slots:
            if slot.handle is not None:
                out.update(slot.handle.wires)
        return out

    def ref_mismatches(self, expected: Counter[tuple[int, str, str, int]]) -> int | None:
        """Streams whose reported refcount differs from `expected` (see WireManager).

        None while some worker's last report predates its last command (it may lag).
        """
        reported: Counter[tuple[int, str, str, int]] = Counter()
        for slot in self._slots:
            handle = slot.handle
            if handle is None or handle.reported_at <= slot.commanded_at:
                return None
        for index, stream in self.streams():
            reported[(index, stream.namespace, stream.peer_node, stream.peer_port)] = stream.refs
        keys = set(reported) | set(expected)
        return sum(reported[key] != expected[key] for key in keys)

    # -- internals ----------------------------------------------------------------

    def _config(self, slot: _Slot) -> WorkerConfig:
        s = self.settings
        return WorkerConfig(
            netns=s.netns,
            listen_host=s.listen_host,
            data_port=s.port_base + slot.index,
            batch_frames=s.batch_frames,
            report_interval=s.report_interval,
            log_level=s.log_level,
            log_format=s.log_format,
            node=s.node,
            index=slot.index,
            wire_key=s.wire_key,
            wire_encrypt=s.wire_encrypt,
            preface_timeout=s.preface_timeout,
            run_dir=s.run_dir,
            cgroup_root=s.cgroup_root,
            cgroup=s.cgroup,
            orphan_grace=s.orphan_grace,
        )

    async def _spawn(self, slot: _Slot) -> WorkerHandle:
        handle = await WorkerHandle.start(self._config(slot))
        log.info("dataplane worker %d: pid %d on port %d", slot.index, handle.pid, handle.data_port)
        return handle

    async def _serve(self, slot: _Slot) -> None:
        """Keeps slot's worker running and in line with `desired`."""
        while not self._closing.is_set():
            if slot.handle is None:
                try:
                    slot.handle = await self._spawn(slot)
                except WorkerError as exc:
                    log.error("dataplane worker %d did not start: %s", slot.index, exc)
                    await asyncio.sleep(slot.restart_backoff.next_delay())
                    continue
                slot.sent.clear()
                slot.dirty |= slot.known
            slot.restart_backoff.healthy()
            await self._follow(slot, slot.handle)
            if self._closing.is_set():
                return
            code = await slot.handle.wait()
            slot.handle = None
            slot.restarts += 1
            delay = slot.restart_backoff.next_delay()
            log.error(
                "dataplane worker %d exited (status %s); restarting in %.1fs and "
                "handing it its %d wires again",
                slot.index,
                code,
                delay,
                len(slot.known),
            )
            await asyncio.sleep(delay)

    async def _follow(self, slot: _Slot, handle: WorkerHandle) -> None:
        """Syncs the worker whenever a wire changes, until it exits."""
        exited = asyncio.create_task(handle.wait())
        try:
            while True:
                if slot.dirty:
                    try:
                        await self._sync(slot, handle)
                    except WorkerError as exc:
                        if not handle.alive:
                            return
                        log.error("dataplane worker %d: %s; retrying", slot.index, exc)
                        await asyncio.sleep(slot.sync_backoff.next_delay())
                    else:
                        slot.sync_backoff.healthy()
                    continue
                slot.wake.clear()
                woken = asyncio.create_task(slot.wake.wait())
                done, _ = await asyncio.wait({exited, woken}, return_when=asyncio.FIRST_COMPLETED)
                woken.cancel()
                if exited in done:
                    return
        finally:
            if not exited.done():
                exited.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await exited

    async def _sync(self, slot: _Slot, handle: WorkerHandle) -> None:
        while slot.dirty:
            wire_id = slot.dirty.pop()
            want = self._desired(wire_id)
            have = slot.sent.get(wire_id)
            if want is None:
                slot.known.discard(wire_id)
                if have is not None:
                    slot.commanded_at = time.monotonic()
                    try:
                        await handle.remove_wire(wire_id)
                    except WorkerError:
                        slot.dirty.add(wire_id)
                        raise
                    del slot.sent[wire_id]
                continue
            slot.known.add(wire_id)
            if have == (want.command, want.generation):
                continue
            fd = os.dup(want.fd)
            slot.commanded_at = time.monotonic()
            try:
                await handle.add_wire(want.command, fd)
            except WorkerError as exc:
                if not handle.alive:
                    slot.dirty.add(wire_id)
                    raise
                self.refused += 1
                log.error("dataplane worker %d refused wire %d: %s", slot.index, wire_id, exc)
                continue
            finally:
                os.close(fd)
            slot.sent[wire_id] = (want.command, want.generation)
