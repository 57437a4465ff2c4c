"""The lab's named namespaces: create and delete them, run code inside one by name.

`in_netns` and `socket_in` resolve a lab name to its path and enter it through
`netns_thread.call_in_netns` (a thread that `setns()`s, so nothing forks); a
socket made inside keeps its namespace (callers use that to listen or send
inside a namespace from the host).

Named namespaces are the files `ip netns` manages under /var/run/netns, made
and removed with `ip netns add/del`, so `ip netns` lists exactly what exists.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from meshwire.control.lab.errors import LabError
from meshwire.control.lab.names import NETNS_DIR, netns_path
from meshwire.dataplane.netns_thread import call_in_netns

T = TypeVar("T")


def resolve(netns: str) -> str:
    """A namespace name (`mwlx-hub`) or a path (`/proc/1/ns/net`) -> its path."""
    return netns if netns.startswith("/") else netns_path(netns)


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
