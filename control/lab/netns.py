"""The lab's one netns helper: create and delete named namespaces, run code inside one.

`in_netns` runs a function in a fresh thread that `setns()`s into the namespace
first; only that thread moves, so the calling process stays in its own
namespace, and a socket the function creates keeps the namespace it was made
in (callers use that to listen or send inside a namespace from the host).
pyroute2's own `netns=` forks, which the preamble warns against; this does not.

Named namespaces are the files `ip netns` manages under /var/run/netns, made
and removed with `ip netns add/del`, so `ip netns` lists exactly what exists.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from meshwire.control.lab.errors import LabError
from meshwire.control.lab.names import NETNS_DIR, netns_path

CLONE_NEWNET = 0x40000000
T = TypeVar("T")

_libc = ctypes.CDLL(None, use_errno=True)


def setns(path: str) -> None:
    """Move the calling thread into the network namespace at `path` (a file path)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def resolve(netns: str) -> str:
    """A namespace name (`mwlx-hub`) or a path (`/proc/1/ns/net`) -> its path."""
    return netns if netns.startswith("/") else netns_path(netns)


def in_netns(netns: str, fn: Callable[[], T]) -> T:
    """Run `fn()` inside `netns` (name or path) and return its result or raise its error.

    A missing namespace raises FileNotFoundError naming the path.
    """
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            setns(resolve(netns))
            result.append(fn())
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=run, name=f"netns:{netns}")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


def socket_in(netns: str | None, family: int, kind: int, proto: int = 0) -> socket.socket:
    """A socket created inside `netns` (None: the caller's own); it stays there
    whatever thread uses it."""
    if netns is None:
        return socket.socket(family, kind, proto)
    return in_netns(netns, lambda: socket.socket(family, kind, proto))


def exists(name: str) -> bool:
    return Path(netns_path(name)).exists()


def create(name: str) -> None:
    """Create the named namespace with its loopback up; an existing one is reused as is."""
    if not exists(name):
        _ip("netns", "add", name)
    _ip("-n", name, "link", "set", "lo", "up")


def delete(name: str) -> None:
    """Delete the named namespace; deleting a missing one is success.

    Interfaces inside it go with it; the far end of a veth in another namespace
    goes too.
    """
    if exists(name):
        _ip("netns", "delete", name)


def names_with_prefix(prefix: str) -> list[str]:
    """Named namespaces whose name starts with `prefix`, sorted."""
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise LabError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
