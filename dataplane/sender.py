"""One outgoing stream: a `Wire/Frames` gRPC call carrying its wires' frames in batches.

The call itself runs in C (cext/h2sender.c): it reads the TAPs, packs their
frames into Batch messages and writes them as HTTP/2 DATA frames, one message
per batch, each sent as soon as no TAP is readable, so at low load a frame goes
out alone and at once and under load batches fill up. This shell connects,
hands the C call its events (fd_watch.py) and reconnects when the call fails.

The TAP fds of the stream's wires sit in one epoll set, and only that epoll fd
is watched by the event loop, so arming and disarming costs one call however
many wires the stream has. While the peer worker is unreachable the sender
keeps trying (backing off from RETRY_MIN to RETRY_MAX; whatever the error, since a
sender that stops is a link that is dead) and the TAP queues fill,
so the kernel drops and counts on the TAP; frames in flight when a call fails
are lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
import socket
from collections.abc import Callable
from typing import Any

from meshwire.base import hostport
from meshwire.dataplane import preface, tcp
from meshwire.dataplane._wirec import ffi, lib
from meshwire.dataplane.fd_watch import FdWatch
from meshwire.dataplane.streams import StreamKey
from meshwire.dataplane.wirec import BatchReader, WireTable

log = logging.getLogger(__name__)

# Reconnect to a restarted peer worker within a tenth of a second, doubling up to a
# second while it stays away: a worker restart should cost frames, not seconds.
RETRY_MIN = 0.05
RETRY_MAX = 1.0
# A connection attempt that neither succeeds nor fails within this is given up
# (a peer node that drops packets), then retried.
CONNECT_TIMEOUT = 5.0
# How long a closing stream waits for the peer to acknowledge its end before the
# connection is dropped (the peer may be gone).
CLOSE_GRACE = 1.0


class Sender:
    """Stream `key`; its wires are set through `set_wires` (Streams calls it)."""

    def __init__(
        self,
        key: StreamKey,
        table: WireTable,
        fd_of: Callable[[int], int],
        batch_frames: int,
        batch_bytes: int,
        keys: preface.Keyring | None = None,
        node: str = "",
        encrypt: bool = True,
    ) -> None:
        """`keys`: the wire keys each connection proves with (preface.py), as node `node`,
        its records then sealed and, with `encrypt`, encrypted (cext/seal.h); None:
        connections start the HTTP/2 stream at once, unauthenticated and in the clear."""
        self.key = key
        self._keys = keys
        self._node = node
        self._encrypt = encrypt
        self._table = table
        self._fd_of = fd_of
        self._fds: dict[int, int] = {}
        self._epoll = select.epoll()
        self._reader = BatchReader(batch_bytes, batch_frames)
        self._call: Any = ffi.NULL
        self._watch: FdWatch | None = None
        self._batches_before = 0  # messages sent by the calls that ended
        self._closing = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"sender {key}")

    @property
    def batches(self) -> int:
        """Messages sent on this stream, over every call it made."""
        live = int(lib.mw_sender_batches(self._call)) if self._call != ffi.NULL else 0
        return self._batches_before + live

    def set_wires(self, wire_ids: frozenset[int]) -> None:
        wanted = {wire_id: self._fd_of(wire_id) for wire_id in wire_ids}
        for wire_id, fd in list(self._fds.items()):
            if wanted.get(wire_id) != fd:
                self._epoll.unregister(fd)
                del self._fds[wire_id]
        for wire_id, fd in wanted.items():
            if wire_id not in self._fds:
                self._epoll.register(fd, select.EPOLLIN)
                self._fds[wire_id] = fd
        self._reader.set_wires(list(wanted))

    async def close(self) -> None:
        """Ends the stream (the peer sees the call finish) and drops the connection.

        A call in progress is ended after its message in flight, and its answer
        awaited for up to CLOSE_GRACE seconds; a connection being made or a
        pause before the next attempt is simply abandoned.
        """
        self._closing.set()
        if self._watch is not None and not self._watch.done:
            self._watch.apply(lib.mw_sender_finish(self._call))
        else:
            self._task.cancel()
        ended, _ = await asyncio.wait({self._task}, timeout=CLOSE_GRACE)
        if not ended:
            self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._epoll.close()

    async def _run(self) -> None:
        pause = RETRY_MIN
        while not self._closing.is_set():
            try:
                sock, session = await self._connect()
            except OSError as exc:
                log.info("stream %s: cannot connect (%s); retrying in %.2fs", self.key, exc, pause)
                await self._pause(pause)
                pause = min(2 * pause, RETRY_MAX)
                continue
            except Exception as exc:  # a stream that stops is a dead link
                log.error("stream %s: cannot connect (%r); retrying in %.2fs", self.key, exc, pause)
                await self._pause(pause)
                pause = min(2 * pause, RETRY_MAX)
                continue
            pause = RETRY_MIN
            with sock:
                try:
                    error = await self._serve(sock, session)
                except MemoryError as exc:
                    error = str(exc)
                except Exception as exc:  # as above: reopen, never stop
                    log.error("stream %s: call failed (%r)", self.key, exc)
                    error = repr(exc)
            if not self._closing.is_set():
                log.info("stream %s ended (%s); reopening", self.key, error or "by the receiver")
                await self._pause(RETRY_MIN)

    async def _pause(self, seconds: float) -> None:
        """Sleeps, but no longer than until the sender is closed."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), seconds)

    async def _connect(self) -> tuple[socket.socket, preface.Session | None]:
        address = (self.key.peer_node, self.key.peer_port)
        sock = socket.socket(tcp.family(self.key.peer_node), socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            tcp.tune(sock)
            connecting = asyncio.get_running_loop().sock_connect(sock, address)
            await asyncio.wait_for(connecting, CONNECT_TIMEOUT)
            session = None
            if self._keys is not None:
                session = await preface.as_sender(sock, self._keys, self._node, self._encrypt)
                if hostport.canonical(session.peer) != hostport.canonical(self.key.peer_node):
                    raise preface.PrefaceError(f"the receiver is node {session.peer!r}")
        except preface.PrefaceError as exc:
            sock.close()
            raise OSError(f"{hostport.join(*address)}: {exc}") from None
        except TimeoutError:
            sock.close()
            raise OSError(
                f"no answer from {hostport.join(*address)} within {CONNECT_TIMEOUT}s"
            ) from None
        except BaseException:
            sock.close()
            raise
        return sock, session

    async def _serve(self, sock: socket.socket, session: preface.Session | None) -> str:
        """Runs one call on the connected socket until it is over; returns why ("" if it
        ended as asked)."""
        call = lib.mw_sender_new(
            sock.fileno(),
            self._table.handle,
            self._reader.handle,
            hostport.join(self.key.peer_node, self.key.peer_port).encode(),
            self.key.namespace.encode(),
        )
        if call == ffi.NULL:
            raise MemoryError(f"stream {self.key}: no memory for a call")
        if session is not None and lib.mw_sender_seal(call, *session.seal_args()) != 0:
            lib.mw_sender_free(call)
            raise MemoryError(f"stream {self.key}: no memory for a call's record keys")
        over = asyncio.get_running_loop().create_future()
        watch = FdWatch(
            sock.fileno(),
            lambda: int(lib.mw_sender_on_readable(call)),
            lambda: int(lib.mw_sender_on_writable(call)),
            lambda: over.set_result(None),
            self._epoll.fileno(),
            lambda: int(lib.mw_sender_on_taps(call)),
        )
        self._call, self._watch = call, watch
        try:
            watch.apply(lib.mw_sender_on_writable(call))
            if self._closing.is_set():
                watch.apply(lib.mw_sender_finish(call))
            await over
            return str(ffi.string(lib.mw_sender_error(call)).decode(errors="replace"))
        finally:
            watch.stop()
            self._batches_before += int(lib.mw_sender_batches(call))
            self._call, self._watch = ffi.NULL, None
            lib.mw_sender_free(call)
