"""The one way meshwire enters a network namespace: `setns()` on a thread.

`setns()` changes only the calling thread's netns, and sockets and TAPs stay in
the netns they were created in. So `call_in_netns` runs a function on a
short-lived thread that enters the namespace first and ends right after: the
caller (and every other thread) stays where it is, nothing forks (pyroute2's
`netns=` forks, which crashes a process with gRPC threads), and whatever the
function opened keeps working from any thread. `setns` alone is for a process
that moves itself before it starts other threads (a worker serving in a node's
netns, `lab nsexec` before it execs).

Every layer uses these: the link drivers (a netlink socket in a pod netns),
the dataplane (a TAP opened in a pod netns) and the lab (its probes and tools).
A netns is given as a path or as an open namespace fd.
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


def setns(netns: str | int, name: str = "") -> None:
    """Move the calling thread (and the threads it starts later) into `netns`.

    `netns` is a path or an open namespace fd (`name` then labels it in errors).
    Raises FileNotFoundError naming a missing path, OSError from setns()
    naming the namespace otherwise.
    """
    if isinstance(netns, int):
        _setns_fd(netns, name or f"fd {netns}")
        return
    try:
        fd = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileNotFoundError(f"netns {netns} does not exist") from None
    try:
        _setns_fd(fd, netns)
    finally:
        os.close(fd)


def _setns_fd(fd: int, name: str) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"setns into {name}: {os.strerror(code)}")


def call_in_netns(netns: str | int, fn: Callable[[], T], name: str = "") -> T:
    """`fn()` run in `netns` (a path, or an open fd labelled `name`); its result or
    its exception, including `setns`'s."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def enter_and_call() -> None:
        try:
            setns(netns, name)
            outcome.append(fn())
        except BaseException as exc:
            failure.append(exc)

    # The thread ends right after: its changed netns never runs anything else.
    thread = threading.Thread(target=enter_and_call, name=f"meshwire-netns {name or netns}")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]
