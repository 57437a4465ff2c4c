"""Runs a function inside a network namespace on a short-lived thread.

`setns()` changes only the calling thread's netns, and sockets and TAPs stay in
the netns they were created in, so a thread that enters the namespace, opens
what it needs and ends lets a process with gRPC threads work in pod netns
without forking (pyroute2's `netns=` forks, which can crash gRPC).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import TypeVar

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)

T = TypeVar("T")


def enter_netns(path: str) -> None:
    """Moves the calling thread, and every thread it starts later, into the netns at `path`.

    For a process's start (a worker serving inside a node's netns), before any
    other thread runs. Raises OSError naming `path`.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"setns into {path}: {os.strerror(code)}")
    finally:
        os.close(fd)


def call_in_netns(path: str, fn: Callable[[], T]) -> T:
    """`fn()` run in the netns at `path`; its result or its exception.

    Raises FileNotFoundError naming `path` if no netns is there, OSError from
    setns() if it is not a network namespace.
    """
    outcome: list[T] = []
    failure: list[BaseException] = []

    def enter_and_call() -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            failure.append(FileNotFoundError(f"netns {path} does not exist"))
            return
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                code = ctypes.get_errno()
                failure.append(OSError(code, f"setns into {path}: {os.strerror(code)}"))
                return
        finally:
            os.close(fd)
        try:
            outcome.append(fn())
        except BaseException as exc:
            failure.append(exc)

    # The thread ends right after: its changed netns never runs anything else.
    thread = threading.Thread(target=enter_and_call, name=f"meshwire-netns {path}")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]
