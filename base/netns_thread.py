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

import contextlib
import ctypes
import os
import queue
import socket
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
    return _on_thread(lambda: setns(netns, name), fn, name or str(netns))


def call_in_new_netns(fn: Callable[[], T]) -> T:
    """`fn()` run in a network namespace made for it (`unshare`); its result or its
    exception, including `unshare`'s. The namespace lives on only if `fn` keeps a
    reference to it: a bind mount of /proc/thread-self/ns/net, a socket."""

    def unshare() -> None:
        if _libc.unshare(CLONE_NEWNET) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"unshare a new netns: {os.strerror(code)}")

    return _on_thread(unshare, fn, "new")


def _on_thread(enter: Callable[[], None], fn: Callable[[], T], label: str) -> T:
    outcome: list[T] = []
    failure: list[BaseException] = []

    def enter_and_call() -> None:
        try:
            enter()
            outcome.append(fn())
        except BaseException as exc:
            failure.append(exc)

    # The thread ends right after: its changed netns never runs anything else.
    thread = threading.Thread(target=enter_and_call, name=f"meshwire-netns {label}")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


class SocketMaker:
    """Makes sockets inside network namespaces on one long-lived thread.

    `call_in_netns` starts and joins a thread per call, a large share of a
    veth's build (two netlink sockets per pass). This thread instead enters the
    namespace asked for, makes the socket, and goes back to the process's netns
    before it takes the next request, so it never keeps a namespace alive (a
    thread's netns is a reference to it) and runs nothing but socket() in a
    foreign one. Should going back ever fail, the thread fails that request and
    every later one goes through `call_in_netns`. Requests from many threads are
    served in turn; the thread starts with the first and lives as long as the
    process.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[_SocketJob] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._broken = False

    def socket(
        self, netns: str | int, family: int, kind: int, proto: int = 0, name: str = ""
    ) -> socket.socket:
        """A socket made inside `netns` (a path, or an open fd labelled `name`); raises
        what `setns` or `socket()` raised."""
        with self._lock:
            if self._broken:
                return call_in_netns(netns, lambda: socket.socket(family, kind, proto), name)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="meshwire-netns-sockets", daemon=True
                )
                self._thread.start()
            job = _SocketJob(netns, name, family, kind, proto)
            self._jobs.put(job)
        job.done.wait()
        if job.error is not None:
            raise job.error
        assert job.result is not None
        return job.result

    def _serve(self) -> None:
        # Home is the process's netns (its main thread's), whichever thread
        # started this one: a caller inside a pod netns must not make that home.
        home = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            while True:
                job = self._jobs.get()
                try:
                    setns(job.netns, job.name)
                    job.result = socket.socket(job.family, job.kind, job.proto)
                except BaseException as exc:
                    job.error = exc
                try:
                    _setns_fd(home, "the socket maker's own netns")
                except OSError as exc:
                    if job.result is not None:
                        job.result.close()
                        job.result = None
                    job.error = exc
                    self._retire(job)
                    return
                job.done.set()
        finally:
            os.close(home)

    def _retire(self, failed: _SocketJob) -> None:
        """Stop serving: fail `failed` and everything queued, so no caller waits for ever."""
        with self._lock:
            self._broken = True
        failed.done.set()
        with contextlib.suppress(queue.Empty):
            while True:
                job = self._jobs.get_nowait()
                job.error = OSError(f"netns socket maker retired: {failed.error}")
                job.done.set()


class _SocketJob:
    def __init__(self, netns: str | int, name: str, family: int, kind: int, proto: int) -> None:
        self.netns = netns
        self.name = name
        self.family = family
        self.kind = kind
        self.proto = proto
        self.result: socket.socket | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()
