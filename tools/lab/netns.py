"""The lab's named namespaces: create and delete them, run code inside one by name.

`in_netns` and `socket_in` resolve a lab name to its path and enter it through
`netns_thread.call_in_netns` (a thread that `setns()`s, so nothing forks); a
socket made inside keeps its namespace (callers use that to listen or send
inside a namespace from the host).

Named namespaces are the files `ip netns` manages under /var/run/netns, made
and removed as `ip netns add/del` do it, in this process (a 1,000-pod lab
would otherwise fork `ip` 2,000 times): the directory is a shared mount, each
file a bind mount of its namespace. So `ip netns` lists exactly what exists
and works on it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from meshwire.base.netns_thread import call_in_netns, call_in_new_netns
from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.lab_names import NETNS_DIR, netns_path, resolve

T = TypeVar("T")

MS_BIND = 0x1000
MS_REC = 0x4000
MS_SHARED = 1 << 20
MNT_DETACH = 2
LOOPBACK_INDEX = 1
_libc = ctypes.CDLL(None, use_errno=True)
_dir_ready = threading.Lock()
_dir_shared = False


def in_netns(netns: str, fn: Callable[[], T]) -> T:
    """Run `fn()` inside `netns` (name or path) and return its result or raise its error.

    A missing namespace raises FileNotFoundError naming the path.
    """
    return call_in_netns(resolve(netns), fn)


def socket_in(netns: str | None, family: int, kind: int, proto: int = 0) -> socket.socket:
    """A socket created inside `netns` (None: the caller's own); it stays there
    whatever thread uses it."""
    if netns is None:
        return socket.socket(family, kind, proto)
    return in_netns(netns, lambda: socket.socket(family, kind, proto))


def exists(name: str) -> bool:
    return Path(netns_path(name)).exists()


def create(name: str) -> None:
    """Create the named namespace with its loopback up; an existing one is reused as is.

    Raises LabError naming the namespace and what the kernel refused.
    """
    path = netns_path(name)
    try:
        if exists(name):
            call_in_netns(path, _loopback_up)
        else:
            _make(path)
    except OSError as exc:
        raise LabError(f"netns {name}: {exc.strerror or exc}") from None


def delete(name: str) -> None:
    """Delete the named namespace; deleting a missing one is success.

    Interfaces inside it go with it (once nothing else holds the namespace); the
    far end of a veth in another namespace goes too.
    """
    path = netns_path(name)
    if not exists(name):
        return
    # Not mounted (EINVAL) is a file left by a cut-short create: it goes all the same.
    _libc.umount2(path.encode(), MNT_DETACH)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise LabError(f"netns {name}: delete {path}: {exc.strerror or exc}") from None


def _make(path: str) -> None:
    """A new namespace bound at `path`, loopback up; nothing left at `path` on failure."""
    _share_dir()
    os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0))

    def bind_and_raise_lo() -> None:
        _mount(b"/proc/thread-self/ns/net", path.encode(), MS_BIND)
        _loopback_up()

    try:
        call_in_new_netns(bind_and_raise_lo)
    except BaseException:
        _libc.umount2(path.encode(), MNT_DETACH)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


def _share_dir() -> None:
    """Make NETNS_DIR a mount with shared propagation, as `ip netns add` does first, so a
    namespace bound under it is seen by every mount namespace that shares it."""
    global _dir_shared
    with _dir_ready:
        if _dir_shared:
            return
        os.makedirs(NETNS_DIR, mode=0o755, exist_ok=True)
        target = NETNS_DIR.encode()
        try:
            _mount(b"", target, MS_SHARED | MS_REC)
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # EINVAL: not a mount point yet
                raise
            _mount(target, target, MS_BIND | MS_REC)
            _mount(b"", target, MS_SHARED | MS_REC)
        _dir_shared = True


def _mount(source: bytes, target: bytes, flags: int) -> None:
    if _libc.mount(source, target, b"none", flags, None) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"mount {target.decode()}: {os.strerror(code)}")


def _loopback_up() -> None:
    """Raise `lo` in the calling thread's namespace."""
    # Imported here: rtnl loads pyroute2 (0.1 s), which the launchers that import this
    # module for `socket_in` (the relay) would pay at every start.
    from meshwire.control.links import rtnl

    sock = rtnl.Rtnl(socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, socket.NETLINK_ROUTE))
    try:
        sock.request(rtnl.set_link(LOOPBACK_INDEX, up=True))
    finally:
        sock.close()


def names_with_prefix(prefix: str) -> list[str]:
    """Named namespaces whose name starts with `prefix`, sorted."""
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []
