"""The wire manager's door for netlink threads (docs/design.md §5).

The grpc link driver runs in netlink threads (pyroute2 cannot run on uvloop),
while the wire manager lives on the event loop and never locks. `ThreadEnds`
carries each driver call over to the loop and waits for its result, so the
manager sees every attach and detach in order, on its own thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Callable
from typing import TypeVar

from meshwire.control.links.driver_errors import LinkError
from meshwire.control.tables.links import LinkRow
from meshwire.control.wire.manager import WireManager
from meshwire.control.wire.types import TapRef

# How long a netlink thread waits for the event loop to take its call.
THREAD_CALL_TIMEOUT = 10.0

T = TypeVar("T")


class ThreadEnds:
    """`WireEnds` for netlink threads: each call runs on the manager's event loop and waits.

    Calls fail (`LinkError`) until `bind` names the loop; a call from the loop's
    own thread runs at once.
    """

    def __init__(self, manager: WireManager) -> None:
        self._manager = manager
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run calls on `loop`; call this from the loop's thread."""
        self._loop = loop
        self._loop_thread = threading.get_ident()

    def held(self, key: str) -> TapRef | None:
        return self._call(lambda: self._manager.held(key), key)

    def attach(self, row: LinkRow, tap: TapRef, fd: int | None) -> None:
        try:
            self._call(lambda: self._manager.attach(row, tap, fd), row.key)
        except _NotTaken:
            if fd is not None:
                os.close(fd)
            raise LinkError(
                f"{row.namespace}/{row.uid}",
                row.local.netns,
                row.local.intf,
                "the wire manager's event loop did not take the TAP",
            ) from None

    def detach(self, key: str) -> None:
        self._call(lambda: self._manager.detach(key), key)

    def _call(self, fn: Callable[[], T], key: str) -> T:
        """`fn()` run on the loop; raises `_NotTaken` if the loop never ran it."""
        if self._loop is None:
            raise _NotTaken(key)
        if threading.get_ident() == self._loop_thread:
            return fn()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if done.set_running_or_notify_cancel():
                try:
                    done.set_result(fn())
                except BaseException as exc:
                    done.set_exception(exc)

        try:
            self._loop.call_soon_threadsafe(run)
        except RuntimeError:
            raise _NotTaken(key) from None
        try:
            return done.result(THREAD_CALL_TIMEOUT)
        except concurrent.futures.TimeoutError:
            if done.cancel():
                raise _NotTaken(key) from None
            return done.result()


class _NotTaken(LinkError):
    """The event loop is closed or too busy: the call never ran."""

    def __init__(self, key: str) -> None:
        super().__init__(key, "", "", "the wire manager's event loop is not running")
