"""Small HTTP and TCP probes, optionally from inside a namespace, and a bounded wait.

A probe never raises for "not there yet": `http_get` returns None when it cannot
connect or read, so callers can poll it with `wait_until`.

A probe of an address of its own namespace can connect to itself: when nothing
listens yet and the kernel picks the probed port as the ephemeral source port,
the SYN meets itself (TCP simultaneous open). That socket would answer the probe
with its own request and, while open or in TIME_WAIT, keep the daemon from
binding its port. A probe resets such a connection at once (no TIME_WAIT) and
counts it as "not there yet".
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable

from meshwire.control.auth import token as tokens
from meshwire.tools.lab.netns import socket_in

POLL = 0.1
# SO_LINGER on, 0 s: close() sends a reset and leaves no TIME_WAIT holding the port.
RESET_ON_CLOSE = struct.pack("ii", 1, 0)


def http_get(
    host: str,
    port: int,
    path: str,
    netns: str | None = None,
    timeout: float = 2.0,
    token: str = "",
) -> tuple[int, str] | None:
    """GET `path` (HTTP/1.0) -> (status, body), from inside `netns` when given, presenting
    `token` as a bearer token if given; None on failure."""
    return http_request("GET", host, port, path, netns=netns, timeout=timeout, token=token)


def http_request(
    method: str,
    host: str,
    port: int,
    path: str,
    body: bytes = b"",
    content_type: str = "application/json",
    netns: str | None = None,
    timeout: float = 2.0,
    token: str = "",
) -> tuple[int, str] | None:
    """`method path` (HTTP/1.0) with `body`, presenting `token` as a bearer token if given
    -> (status, body); None on failure."""
    try:
        sock = socket_in(netns, socket.AF_INET, socket.SOCK_STREAM)
    except OSError:
        return None
    head = f"{method} {path} HTTP/1.0\r\nHost: {host}\r\n"
    if token:
        head += f"Authorization: {tokens.header(token)}\r\n"
    if body or method != "GET":
        head += f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
    with sock:
        sock.settimeout(timeout)
        try:
            _connect(sock, host, port)
            sock.sendall(head.encode() + b"\r\n" + body)
            chunks = []
            while data := sock.recv(65536):
                chunks.append(data)
        except OSError:
            return None
    answer_head, _, answer = b"".join(chunks).partition(b"\r\n\r\n")
    parts = answer_head.split(b" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        return None
    return int(parts[1]), answer.decode(errors="replace")


def tcp_open(host: str, port: int, netns: str | None = None) -> bool:
    """Whether something accepts connections on host:port, seen from `netns` when given."""
    try:
        with socket_in(netns, socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            _connect(sock, host, port)
            return True
    except OSError:
        return False


def _connect(sock: socket.socket, host: str, port: int) -> None:
    """Connect, raising ConnectionRefusedError for a connection to the socket itself
    (then closing `sock` resets it and frees the port)."""
    sock.connect((host, port))
    if sock.getsockname() == sock.getpeername():
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET_ON_CLOSE)
        raise ConnectionRefusedError(f"{host}:{port}: connected to itself; nothing listens")


def wait_until(
    condition: Callable[[], bool], timeout: float, abort: Callable[[], str | None]
) -> bool:
    """Poll `condition` until true (True) or `timeout` s pass (False).

    `abort` is polled too: a non-empty reason (a process died) raises at once
    instead of waiting out the timeout; the caller's LabError wraps it.
    """
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        reason = abort()
        if reason:
            raise RuntimeError(reason)
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL)
