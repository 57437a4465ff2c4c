"""The Wire stream's TCP connections: their address family and socket options, alike on both ends.

- TCP_NODELAY: a batch leaves as soon as it is made (gRPC sets it too).
- Keepalive probes after KEEPALIVE_IDLE seconds of silence, every
  KEEPALIVE_INTERVAL, KEEPALIVE_COUNT times: a peer node that vanished without
  a word (power off, partition) fails an idle connection within about a minute,
  so a receiver does not keep a dead call's buffers and a sender reconnects.
- TCP_USER_TIMEOUT: data unacknowledged for USER_TIMEOUT_MS fails the
  connection, so a stream that is sending finds the same within 20 s.
"""

from __future__ import annotations

import socket

KEEPALIVE_IDLE = 30
KEEPALIVE_INTERVAL = 10
KEEPALIVE_COUNT = 3
USER_TIMEOUT_MS = 20_000


def family(host: str) -> socket.AddressFamily:
    """The address family of a numeric node address (IPv6 ones have a colon)."""
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def tune(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_COUNT)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, USER_TIMEOUT_MS)
