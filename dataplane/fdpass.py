"""Datagrams with attached fds over a Unix SOCK_SEQPACKET socket (SCM_RIGHTS).

Received fds are close-on-exec (non-inheritable). A datagram whose fds or
bytes did not all fit is refused with every fd that did arrive closed, so
nothing leaks and nothing is half-handled.
"""

from __future__ import annotations

import array
import os
import socket
from collections.abc import Sequence

MAX_DATAGRAM = 256 * 1024
MAX_FDS = 4


class FdPassError(OSError):
    """A datagram that arrived truncated (payload or fds) and was refused."""


def send(sock: socket.socket, data: bytes, fds: Sequence[int] = ()) -> None:
    socket.send_fds(sock, [data], list(fds))


def receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One datagram and its fds; b"" at end of stream. Raises BlockingIOError if none."""
    data, ancdata, flags, _ = sock.recvmsg(
        MAX_DATAGRAM, socket.CMSG_SPACE(MAX_FDS * 4), socket.MSG_CMSG_CLOEXEC
    )
    fds: list[int] = []
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            received = array.array("i")
            received.frombytes(payload[: len(payload) - len(payload) % received.itemsize])
            fds.extend(received)
    for fd in fds:
        os.set_inheritable(fd, False)
    if flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC):
        for fd in fds:
            os.close(fd)
        what = "fds" if flags & socket.MSG_CTRUNC else "payload"
        raise FdPassError(f"control socket: datagram arrived with its {what} truncated")
    return data, fds
