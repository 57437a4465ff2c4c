"""Open a network namespace by path, checked, and talk netlink inside it.

A netns is named by a path: a bind mount (`/var/run/netns/x`) or a process's
(`/proc/<pid>/ns/net`). Nothing here ever creates a namespace: a missing path is
`NetnsGone`, a path that is not a network namespace is `NotANetns`, both naming
the path.

`netlink(ns)` gives a `Netlink`: a raw rtnetlink socket (`rtnl.py`) and a
pyroute2 `IPRoute`, each socket created inside the namespace by
`netns_thread.SocketMaker`; a netlink socket stays bound to the
netns it was created in, so the calling thread (and process) never changes netns
and nothing forks (pyroute2's own `netns=` forks a child per socket, which a
process with gRPC threads must avoid).

The raw sockets are kept between calls (`SocketPool`): making one costs a
round trip to the socket maker's thread, more than a veth pair's whole
netlink work when a pass builds 1,500 of them. A kept socket holds its netns
alive, so an idle one is closed after `POOL_IDLE` seconds: a pod's netns
deleted by its runtime is torn down at most that much later.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyroute2 import IPRoute

from meshwire.base.netns_thread import CLONE_NEWNET, SocketMaker

from .rtnl import Rtnl

# The calling thread's own netns, as a path (what "the host netns" means by default).
CURRENT = "/proc/thread-self/ns/net"
# ioctl on a namespace file: which kind of namespace it is (Linux 4.11+).
NS_GET_NSTYPE = 0xB703
# Every socket the drivers make in a pod netns: one thread for the process,
# entering each netns only for socket() (see SocketMaker).
_SOCKETS = SocketMaker()
# Seconds an unused rtnetlink socket is kept for the next call into its netns.
POOL_IDLE = 0.25


class NetnsGone(Exception):
    """The netns path does not exist (the pod or namespace is gone, or not there yet)."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"netns {path} does not exist")


class NotANetns(Exception):
    """The path exists but is not a network namespace."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        super().__init__(f"{path} is not a network namespace: {reason}")


@dataclass(frozen=True, slots=True)
class Netns:
    """An open network namespace. `fd` is valid only inside `open_netns`."""

    path: str
    fd: int
    # (st_dev, st_ino) of the namespace: equal iff two paths are the same netns.
    identity: tuple[int, int]


def identity_of(path: str) -> tuple[int, int] | None:
    """(st_dev, st_ino) of what is at `path` now; None if nothing is. Two paths are the
    same namespace iff their identities are equal; a `/var/run/netns` entry whose bind
    mount is gone (or was replaced) has another identity than the namespace it named."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


@contextmanager
def open_netns(path: str) -> Iterator[Netns]:
    """Open the netns at `path`; the fd is closed on exit.

    Raises `NetnsGone` if nothing is at `path` (also for a `/proc/<pid>` whose
    process exited) and `NotANetns` for a directory, a plain file (such as a
    `/var/run/netns` entry whose bind mount is gone) or another kind of namespace.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NetnsGone(path) from None
    except OSError as exc:
        raise NotANetns(path, exc.strerror or str(exc)) from None
    try:
        try:
            nstype = fcntl.ioctl(fd, NS_GET_NSTYPE)
        except OSError as exc:
            if exc.errno == errno.ENOTTY:
                raise NotANetns(path, "not a namespace file") from None
            raise NotANetns(path, exc.strerror or str(exc)) from None
        if nstype != CLONE_NEWNET:
            raise NotANetns(path, "a namespace of another kind")
        st = os.fstat(fd)
        yield Netns(path, fd, (st.st_dev, st.st_ino))
    finally:
        os.close(fd)


def _route_socket(ns: Netns) -> socket.socket:
    """A NETLINK_ROUTE socket created inside `ns`."""
    return socket_in(ns, socket.AF_NETLINK, socket.SOCK_DGRAM, socket.NETLINK_ROUTE)


def _netlink_socket_in(ns: Netns) -> int:
    """The fd of a NETLINK_ROUTE socket created inside `ns`."""
    return _route_socket(ns).detach()


@contextmanager
def rtnl_at(path: str) -> Iterator[Rtnl]:
    """A raw rtnetlink socket of its own in the netns at `path` (not from `POOL`), closed
    on exit; raises what `open_netns` raises. For a reader that dumps many namespaces
    once each, where a kept socket would only hold them alive."""
    with open_netns(path) as ns:
        sock = Rtnl(_route_socket(ns))
    try:
        yield sock
    finally:
        sock.close()


def socket_in(ns: Netns, family: int, kind: int, proto: int = 0) -> socket.socket:
    """A socket created inside `ns`; it stays bound to `ns` whichever thread uses it."""
    return _SOCKETS.socket(ns.fd, family, kind, proto, ns.path)


class Netlink:
    """An rtnetlink connection into one netns, for one thread.

    `rtnl` is a raw socket for the requests that build links (`rtnl.py`); for
    everything else, attribute access goes to a pyroute2 `IPRoute` in the same
    netns (`link`, `addr`, `get_netnsid`, ...), created on first use: a pass
    that only builds links never pays for one.
    """

    def __init__(self, ns: Netns | None) -> None:
        self._ipr: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # The netns as opened by the caller now (its fd is valid only as long as that).
        self.ns = ns
        sock = (
            socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, socket.NETLINK_ROUTE)
            if ns is None
            else socket_in(ns, socket.AF_NETLINK, socket.SOCK_DGRAM, socket.NETLINK_ROUTE)
        )
        try:
            self.rtnl = Rtnl(sock)
        except BaseException:
            sock.close()
            raise

    @property
    def ipr(self) -> Any:
        """pyroute2's `IPRoute` in this netns (see `netlink`)."""
        if self._ipr is None:
            fileno = None if self.ns is None else _netlink_socket_in(self.ns)
            # A plain selector loop of its own: pyroute2 fails on uvloop, which
            # `asyncio.new_event_loop()` would return once uvloop's policy is installed.
            loop = asyncio.SelectorEventLoop()
            try:
                self._ipr = IPRoute(
                    fileno=fileno, groups=0, ext_ack=True, strict_check=True, use_event_loop=loop
                )
            except BaseException:
                loop.close()
                if fileno is not None:
                    os.close(fileno)
                raise
            self._loop = loop
        return self._ipr

    def __getattr__(self, name: str) -> Any:
        # Only pyroute2's public API: an attribute of our own missing (a failed
        # __init__, an AttributeError inside `ipr`) must not recurse into `ipr`.
        if name.startswith("_") or name in ("ipr", "rtnl"):
            raise AttributeError(name)
        return getattr(self.ipr, name)

    def close(self) -> None:
        self.rtnl.close()
        self.close_ipr()

    def close_ipr(self) -> None:
        """Close the pyroute2 part, if it was made (the raw socket stays)."""
        if self._ipr is not None and self._loop is not None:
            self._ipr.close()
            # One turn lets the aborted transport finish closing its socket.
            self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()
            self._ipr = None
            self._loop = None


class SocketPool:
    """Raw rtnetlink connections kept per netns between calls, each lent to one caller
    at a time.

    A connection is keyed by its netns's identity, which stays unique while
    the pool holds it: the kept socket holds the netns alive, so its inode
    cannot be reused. It goes back to the pool without its pyroute2 part
    (pyroute2 binds a socket to the thread that made it), and is closed once
    idle for `idle` seconds, by a thread that runs while the pool holds any.
    """

    def __init__(self, idle: float = POOL_IDLE) -> None:
        self._idle_s = idle
        self._lock = threading.Lock()
        # identity -> (when given back, connection), oldest first.
        self._kept: dict[tuple[int, int], list[tuple[float, Netlink]]] = {}
        self._sweeper: threading.Thread | None = None

    def take(self, ns: Netns) -> Netlink:
        """A connection into `ns`: the one given back last, or a new one."""
        with self._lock:
            kept = self._kept.get(ns.identity)
            if kept:
                _, connection = kept.pop()
                if not kept:
                    del self._kept[ns.identity]
                # The same netns, opened anew: its pyroute2 part is made through this fd.
                connection.ns = ns
                return connection
        return Netlink(ns)

    def give(self, ns: Netns, connection: Netlink) -> None:
        """Keep `connection` (taken for `ns`) for the next caller; close it instead if a
        request on it was cut short (an exception between its send and its answer)."""
        connection.close_ipr()
        if not connection.rtnl.answered:
            connection.close()
            return
        with self._lock:
            self._kept.setdefault(ns.identity, []).append((time.monotonic(), connection))
            if self._sweeper is None:
                self._sweeper = threading.Thread(
                    target=self._sweep, name="meshwire-netlink-pool", daemon=True
                )
                self._sweeper.start()

    def kept(self) -> int:
        """How many connections the pool holds."""
        with self._lock:
            return sum(len(each) for each in self._kept.values())

    def close_idle(self, older_than: float = 0.0) -> None:
        """Close every kept connection given back more than `older_than` seconds ago."""
        cutoff = time.monotonic() - older_than
        closing = []
        with self._lock:
            for identity in list(self._kept):
                kept = self._kept[identity]
                closing += [connection for given, connection in kept if given <= cutoff]
                kept[:] = [(given, c) for given, c in kept if given > cutoff]
                if not kept:
                    del self._kept[identity]
        for connection in closing:
            connection.close()

    def _sweep(self) -> None:
        while True:
            time.sleep(self._idle_s / 2)
            self.close_idle(self._idle_s)
            with self._lock:
                if not self._kept:
                    self._sweeper = None
                    return


POOL = SocketPool()


@contextmanager
def netlink(ns: Netns | None = None) -> Iterator[Netlink]:
    """A `Netlink` talking to `ns` (None: a new one in the calling thread's own netns).

    Use it only from the thread that opened it: pyroute2 keeps one socket per
    thread and would open a fresh one, in that thread's netns, from any other.
    Works whatever event loop policy the process installed (uvloop included).
    Both sockets check requests strictly (NETLINK_GET_STRICT_CHK), so a dump
    request that names an ifindex gets only that interface (`iface.addresses`).
    A connection into `ns` comes from `POOL` and goes back to it.
    """
    if ns is None:
        connection = Netlink(None)
        try:
            yield connection
        finally:
            connection.close()
        return
    connection = POOL.take(ns)
    try:
        yield connection
    finally:
        POOL.give(ns, connection)
