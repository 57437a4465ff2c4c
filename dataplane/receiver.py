"""The worker's Wire service: accepts connections and serves the frame streams on them.

Each accepted connection gets a C receiver (cext/h2receiver.c) that speaks gRPC
over HTTP/2, decodes the Batch messages of every call on it as they arrive and
writes each frame to its wire's TAP; this shell only accepts and relays socket
events (fd_watch.py). A frame for a wire the worker lacks, or one of another
topology namespace than its call's, is dropped and counted by the table. A
message that breaks the Batch format is counted and skipped; the stream goes
on, so one bad sender never stalls other wires.

With wire keys (config `auth.wire_key`), a connection gets its receiver (and
its buffers) only after the sender passed the authenticated preface
(preface.py), and from then on its records are sealed (cext/seal.h). A
connection that fails the preface, starts HTTP/2 at once (a stock gRPC client,
a node with auth off), does not finish it within the preface timeout, or
arrives while PENDING_MAX prefaces (PENDING_PER_SOURCE from its address) are
under way is closed before nghttp2 sees a byte of it, counted and logged (once
per address a minute). A record that fails authentication (altered, injected
or replayed on the path) ends its connection and is counted and logged the same
way: a refusal found late. A passed connection is bound to
the node it authenticated as: its calls deliver only to wires whose far end is
on that node (WireTable.tag).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import Any

from meshwire.base import hostport
from meshwire.dataplane import preface, tcp
from meshwire.dataplane._wirec import ffi, lib
from meshwire.dataplane.fd_watch import FdWatch
from meshwire.dataplane.wirec import WireTable

log = logging.getLogger(__name__)

BACKLOG = 128
# Prefaces under way at most: a node has a few peers with a handful of streams each, so
# more means a flood; its connections are closed at once and the wires already made
# keep flowing (a preface costs a socket and a small task, nothing more).
PENDING_MAX = 256
# ... and from one source address, so one flooding host cannot crowd out the others.
PENDING_PER_SOURCE = 32


class Listener:
    """Serves the Wire service on one TCP port for the wires of `table`."""

    def __init__(
        self,
        table: WireTable,
        keys: preface.Keyring | None = None,
        node: str = "",
        preface_timeout: float = preface.TIMEOUT,
    ) -> None:
        self._table = table
        self._keys = keys
        self._node = node
        self._preface_timeout = preface_timeout
        self.refusals = preface.Refusals()
        self._prefaces: set[asyncio.Task[None]] = set()
        # Prefaces under way per source address; an address leaves with its last one.
        self._pending: dict[str, int] = {}
        self._stats: Any = ffi.new("mw_rx_stats *")
        self._sock: socket.socket | None = None
        self._connections: dict[int, _Connection] = {}

    def start(self, host: str, port: int) -> int:
        """Listens on host:port (port 0: any free one); returns the port. Raises OSError."""
        sock = socket.socket(tcp.family(host), socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(BACKLOG)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        asyncio.get_running_loop().add_reader(sock.fileno(), self._accept)
        return int(sock.getsockname()[1])

    @property
    def incoming(self) -> int:
        """Calls being served now."""
        return int(self._stats.streams)

    @property
    def malformed(self) -> int:
        """Messages received that broke the Batch format."""
        return int(self._stats.malformed)

    def close(self) -> None:
        """Stops listening and closes every connection, saying GOAWAY where the socket
        takes it at once."""
        if self._sock is not None:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        for task in list(self._prefaces):
            task.cancel()
        for connection in list(self._connections.values()):
            connection.shut()

    def _accept(self) -> None:
        assert self._sock is not None
        while True:
            try:
                sock, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. out of fds: the next connection may fare better
                log.warning("wire service: accept failed: %s", exc)
                return
            sock.setblocking(False)
            tcp.tune(sock)
            if self._keys is None:
                self._serve(sock)
                continue
            address = _address(sock)
            if len(self._prefaces) >= PENDING_MAX:
                self._refuse(sock, address, f"{PENDING_MAX} prefaces under way already")
                continue
            if self._pending.get(address, 0) >= PENDING_PER_SOURCE:
                self._refuse(sock, address, f"{PENDING_PER_SOURCE} of its prefaces under way")
                continue
            self._pending[address] = self._pending.get(address, 0) + 1
            task = asyncio.get_running_loop().create_task(
                self._authenticate(sock, self._keys, address)
            )
            self._prefaces.add(task)
            task.add_done_callback(self._prefaces.discard)

    def _refuse(self, sock: socket.socket, address: str, why: str) -> None:
        self.refusals.refused("wire service", address, why)
        sock.close()

    async def _authenticate(self, sock: socket.socket, keys: preface.Keyring, address: str) -> None:
        """Serves the connection once its sender passed the preface; closes it otherwise."""
        try:
            session = await preface.as_receiver(sock, keys, self._node, self._preface_timeout)
        except OSError as exc:  # PrefaceError and TimeoutError included
            self._refuse(sock, address, str(exc) or "no preface in time")
            return
        except BaseException:
            sock.close()
            raise
        finally:
            left = self._pending.pop(address) - 1
            if left:
                self._pending[address] = left
        if self._sock is None:  # the listener closed meanwhile
            sock.close()
            return
        self._serve(sock, session)

    def _serve(self, sock: socket.socket, session: preface.Session | None = None) -> None:
        """Serves the connection, its records sealed with `session`'s keys if given."""
        try:
            connection = _Connection(
                sock, self._table, self._stats, self._forget, self.refusals, session
            )
        except MemoryError as exc:
            log.warning("wire service: %s; connection refused", exc)
            sock.close()
            return
        self._connections[sock.fileno()] = connection
        connection.start()

    def _forget(self, fd: int) -> None:
        self._connections.pop(fd, None)


def _address(sock: socket.socket) -> str:
    try:
        return str(sock.getpeername()[0])
    except OSError:
        return "a peer that left"


class _Connection:
    def __init__(
        self,
        sock: socket.socket,
        table: WireTable,
        stats: Any,
        forget: Callable[[int], None],
        refusals: preface.Refusals,
        session: preface.Session | None = None,
    ) -> None:
        self._sock = sock
        self._fd = sock.fileno()
        self._forget = forget
        self._refusals = refusals
        self._receiver: Any = lib.mw_receiver_new(self._fd, table.handle, stats)
        if self._receiver == ffi.NULL:
            raise MemoryError("wire service: no memory for a connection")
        if session is not None and lib.mw_receiver_seal(self._receiver, *session.seal_args()) != 0:
            lib.mw_receiver_free(self._receiver)
            raise MemoryError("wire service: no memory for a connection's record keys")
        if session is not None:
            lib.mw_receiver_bind(self._receiver, hostport.canonical(session.peer).encode())
        receiver = self._receiver
        self._watch = FdWatch(
            self._fd,
            lambda: int(lib.mw_receiver_on_readable(receiver)),
            lambda: int(lib.mw_receiver_on_writable(receiver)),
            self._end,
        )

    def start(self) -> None:
        self._watch.apply(lib.mw_receiver_on_writable(self._receiver))

    def shut(self) -> None:
        """GOAWAY if the socket takes it now, then the connection is closed."""
        if not self._watch.done:
            lib.mw_receiver_shut(self._receiver)
            self._watch.stop()
            self._end()

    def _end(self) -> None:
        if self._receiver == ffi.NULL:
            return
        error = ffi.string(lib.mw_receiver_error(self._receiver)).decode(errors="replace")
        if lib.mw_receiver_forged(self._receiver):
            self._refusals.refused("wire service", _address(self._sock), error)
        elif error:
            log.info("wire service: connection from %s ended: %s", self._peer(), error)
        lib.mw_receiver_free(self._receiver)
        self._receiver = ffi.NULL
        self._forget(self._fd)
        self._sock.close()

    def _peer(self) -> str:
        try:
            return str(self._sock.getpeername())
        except OSError:
            return "a peer that left"
