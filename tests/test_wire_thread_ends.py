"""ThreadEnds: the grpc driver's netlink threads reach the wire manager only on its loop.

The manager never locks, so every call must run on the event loop's thread,
in order; a call the loop cannot take (not bound yet, closed) fails as a
`LinkError` for that row, and the TAP fd it carried is closed, not leaked.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any, cast

import pytest
from wire_helpers import grpc_row, is_open

from meshwire.control.links.driver_errors import LinkError
from meshwire.control.tables.links import LinkRow
from meshwire.control.wire.manager import WireManager
from meshwire.control.wire.thread_ends import ThreadEnds
from meshwire.control.wire.types import TapRef

ROW = grpc_row(5, "r1", "r2", "10.1.0.2")
TAP = TapRef((1, 2), 7)


class ThreadRecordingManager:
    """Stands in for WireManager: records which thread ran each call, and in what order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.fds: list[int] = []

    def held(self, key: str) -> TapRef | None:
        self.calls.append((f"held {key}", threading.get_ident()))
        return TAP

    def attach(self, row: LinkRow, tap: TapRef, fd: int | None) -> None:
        self.calls.append((f"attach {row.key}", threading.get_ident()))
        if fd is not None:
            self.fds.append(fd)

    def detach(self, key: str) -> None:
        self.calls.append((f"detach {key}", threading.get_ident()))


def ends_for(manager: ThreadRecordingManager) -> ThreadEnds:
    return ThreadEnds(cast(WireManager, cast(Any, manager)))


def pipe_fd() -> int:
    read, write = os.pipe()
    os.close(write)
    return read


async def test_calls_from_a_thread_run_on_the_loop_thread_in_order() -> None:
    manager = ThreadRecordingManager()
    ends = ends_for(manager)
    ends.bind(asyncio.get_running_loop())
    fd = pipe_fd()

    def driver() -> TapRef | None:
        ends.attach(ROW, TAP, fd)
        held = ends.held(ROW.key)
        ends.detach(ROW.key)
        return held

    assert await asyncio.to_thread(driver) == TAP
    loop_thread = threading.get_ident()
    assert manager.calls == [
        (f"attach {ROW.key}", loop_thread),
        (f"held {ROW.key}", loop_thread),
        (f"detach {ROW.key}", loop_thread),
    ]
    assert manager.fds == [fd]
    os.close(fd)


async def test_a_call_from_the_loop_thread_itself_runs_at_once() -> None:
    manager = ThreadRecordingManager()
    ends = ends_for(manager)
    ends.bind(asyncio.get_running_loop())
    assert ends.held(ROW.key) == TAP
    assert manager.calls == [(f"held {ROW.key}", threading.get_ident())]


def test_before_bind_an_attach_fails_for_its_row_and_closes_the_fd() -> None:
    manager = ThreadRecordingManager()
    fd = pipe_fd()
    with pytest.raises(LinkError, match="event loop did not take the TAP") as caught:
        ends_for(manager).attach(ROW, TAP, fd)
    assert caught.value.link == f"{ROW.namespace}/{ROW.uid}"
    assert not is_open(fd)
    assert manager.calls == []


def test_after_the_loop_closed_a_call_fails_instead_of_waiting() -> None:
    manager = ThreadRecordingManager()
    ends = ends_for(manager)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(asyncio.sleep(0))
    ends.bind(loop)
    loop.close()
    fd = pipe_fd()
    result: list[BaseException] = []

    def driver() -> None:
        try:
            ends.attach(ROW, TAP, fd)
        except LinkError as exc:
            result.append(exc)

    thread = threading.Thread(target=driver)
    thread.start()
    thread.join(5)
    assert not thread.is_alive()
    assert [type(exc) for exc in result] == [LinkError]
    assert not is_open(fd)
    assert manager.calls == []
