"""Opening the daemon's listen ports: a port that is taken is waited for, not fatal.

A port the daemon serves on (`metrics.listen`, `peer.listen`, each worker's
`dataplane.port_base + k`) can be held for a while by something that lets go
of it: an outgoing connection on this host that drew it as its ephemeral
source port, then that connection's TIME_WAIT (60 s on Linux), a previous
daemon still exiting, or a node address not configured yet at boot. Exiting at
once would turn each of these into a crash loop whose restarts back off to
minutes under kubelet. So a start that fails is retried with backoff, every
attempt logged naming the config key, and only a port still taken after
BIND_PATIENCE stops the daemon, with a ListenError naming the key.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from meshwire.control.common.retries import ExponentialBackoff

log = logging.getLogger(__name__)

T = TypeVar("T")

# Twice Linux's TIME_WAIT: a port drawn by a short outgoing connection is free
# again well within it, and a port held for longer is held by something that
# will not let go (another program listening): the operator must act.
BIND_PATIENCE = 120.0
# First retry after 200 ms (a previous daemon exiting), then doubling to 5 s.
RETRY_MIN = 0.2
RETRY_MAX = 5.0


class ListenError(OSError):
    """A listen port stayed unavailable for the whole patience; names its config key."""


class StoppedWaiting(Exception):
    """The daemon was told to stop while it waited for a listen port."""


@dataclass
class StartWaits:
    """The daemon's start, as its waits for ports see it."""

    # Set by the daemon's stop: a wait between two attempts ends in StoppedWaiting.
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    # The port waited for now and why ("peer.listen :51111 ([Errno 98] ...)"),
    # "" while no start is waiting: what /readyz reports.
    waiting_for: str = ""


async def start_patiently(
    what: str,
    start: Callable[[], Awaitable[T]],
    errors: tuple[type[Exception], ...] = (OSError,),
    patience: float = BIND_PATIENCE,
    backoff: ExponentialBackoff | None = None,
    waits: StartWaits | None = None,
) -> T:
    """`await start()`, retried while it raises one of `errors` and `patience` lasts.

    `what` names the config key and address ("metrics.listen 0.0.0.0:51100").
    `start` must leave nothing behind when it fails: it is simply called again.
    Raises ListenError (from the last failure) once `patience` seconds have passed,
    and StoppedWaiting as soon as `waits.stopping` is set between two attempts.
    """
    waits = waits or StartWaits()
    backoff = backoff or ExponentialBackoff(RETRY_MIN, RETRY_MAX)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    while True:
        try:
            started = await start()
        except errors as exc:
            delay = backoff.when(what)
            if loop.time() + delay > deadline:
                waits.waiting_for = ""
                raise ListenError(
                    f"{what}: cannot listen, still failing after {patience:g} s: {exc}"
                ) from exc
            log.warning("%s: cannot listen yet (%s); retrying in %.1fs", what, exc, delay)
            waits.waiting_for = f"{what} ({exc})"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waits.stopping.wait(), delay)
            if waits.stopping.is_set():
                waits.waiting_for = ""
                raise StoppedWaiting(f"{what}: stopped while waiting to listen") from exc
        else:
            waits.waiting_for = ""
            return started
