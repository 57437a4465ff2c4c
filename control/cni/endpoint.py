"""The daemon's CNI endpoint: a Unix socket server in front of a `CniHandler`.

One request per connection (`frame.py`). Every connection is its own task, so
a slow handler (an ADD waiting for a pod's interfaces) never delays another
pod's request. Whatever a client sends, it gets an answer or a closed
connection, never a dead server: a malformed frame is a CNI error result
(code 6), a handler failure is the handler's `CniError`, and an unexpected
exception is code 100 with the exception in `details` (and in the log).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import stat
import struct
import tempfile
from typing import Protocol

from meshwire.control.cni.frame import (
    MAX_FRAME_BYTES,
    decode_request,
    encode_response,
    error_version,
)
from meshwire.control.cni.protocol import (
    LATEST_VERSION,
    CniError,
    CniRequest,
    Command,
    ErrorCode,
    Response,
    error_response,
    parse_request,
    success_response,
)

log = logging.getLogger(__name__)

# A shim writes its whole request at once; a client that has not within this
# time is stuck or hostile, and holds a task for nothing.
REQUEST_READ_TIMEOUT = 10.0
# On close, in-flight requests get this long to finish; the rest are cancelled
# and their shims answer "try again later" (code 11).
CLOSE_GRACE = 5.0
# struct ucred, as SO_PEERCRED gives it: pid, uid, gid.
PEERCRED = struct.Struct("3i")


class CniHandler(Protocol):
    """What the daemon does for each CNI command; raise `CniError` to fail it.

    A pod that is in no topology is not an error: return normally and the
    plugin passes the previous result through untouched.
    """

    async def add(self, request: CniRequest) -> None:
        """Records the pod (namespace/name, netns, container id) and returns once its
        local interfaces exist; raises CniError (code 11 on timeout) otherwise."""

    async def delete(self, request: CniRequest) -> None:
        """Idempotent; a DEL for a container id the pod no longer has is ignored."""

    async def check(self, request: CniRequest) -> None:
        """Raises CniError when the pod's links are not as its topology says."""

    async def status(self) -> None:
        """Raises CniError 50 (not available) or 51 (limited connectivity)."""

    async def gc(self, request: CniRequest) -> None:
        """Cleans up state of attachments not in `request.valid_attachments`."""


class EndpointError(RuntimeError):
    """The endpoint cannot listen; the message names `cni.socket` and the path."""


class CniEndpoint:
    """Serves `handler` on the Unix socket `path` (config key `cni.socket`).

    `start` creates the socket's directory, removes a stale socket left by a
    dead daemon, and refuses (EndpointError) a path that is not a socket or
    that a live daemon still serves. The socket is mode 0600 from its first
    moment: it is bound inside a fresh 0700 directory beside `path`, set 0600
    there, and renamed into place. And each connection's peer must be uid
    `peer_uid` (SO_PEERCRED; root, the runtime): any other is answered a CNI
    error (code 100) without a byte of its request read. A path of any length
    works (AF_UNIX addresses hold 107 bytes; the socket is bound and probed
    through its directory's fd). `close` stops intake, waits `grace` seconds for
    in-flight requests, cancels the rest and removes the socket file if it is
    still the one this endpoint created.
    """

    def __init__(self, path: str, handler: CniHandler, peer_uid: int = 0) -> None:
        self.path = path
        self._handler = handler
        self._peer_uid = peer_uid
        self._server: asyncio.Server | None = None
        self._inode = 0
        # Connection tasks not yet answered; each removes itself when done.
        self._inflight: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        directory = os.path.dirname(self.path) or "."
        try:
            os.makedirs(directory, mode=0o755, exist_ok=True)
            dir_fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            problem = f"cannot create {directory}: {exc}"
            raise EndpointError(f"cni.socket {self.path}: {problem}") from exc
        try:
            name = os.path.basename(self.path)
            _remove_stale(self.path, _short(dir_fd, name))
            sock = _bind_private(directory, dir_fd, name)
        finally:
            os.close(dir_fd)
        self._server = await asyncio.start_unix_server(
            self._serve, sock=sock, limit=MAX_FRAME_BYTES
        )
        self._inode = os.stat(self.path).st_ino

    async def close(self, grace: float = CLOSE_GRACE) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        pending = set(self._inflight)
        if pending:
            _, late = await asyncio.wait(pending, timeout=grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        with contextlib.suppress(FileNotFoundError):
            if os.stat(self.path).st_ino == self._inode:
                os.unlink(self.path)

    async def __aenter__(self) -> CniEndpoint:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._inflight.add(task)
        try:
            refusal = self._refusal(writer.get_extra_info("socket"))
            if refusal is not None:
                response = refusal
            else:
                frame = await _read_frame(reader)
                response = await self._answer(frame) if isinstance(frame, bytes) else frame
            writer.write(encode_response(response))
            await writer.drain()
        except (ConnectionError, TimeoutError) as exc:
            log.info("cni: client went away: %s", exc)
        finally:
            self._inflight.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _refusal(self, sock: socket.socket) -> Response | None:
        """The answer to a peer that is not uid `peer_uid`; None for one that is."""
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, PEERCRED.size)
        pid, uid, _ = PEERCRED.unpack(creds)
        if uid == self._peer_uid:
            return None
        log.warning(
            "cni: refused a connection from pid %d, uid %d: not uid %d", pid, uid, self._peer_uid
        )
        error = CniError(
            ErrorCode.INTERNAL,
            f"meshwire daemon: only uid {self._peer_uid} may use the CNI socket (peer uid {uid})",
        )
        return error_response(error, LATEST_VERSION)

    async def _answer(self, frame: bytes) -> Response:
        version, request = LATEST_VERSION, None
        try:
            shim = decode_request(frame)
            version = error_version(shim.stdin)
            request = parse_request(shim.env, shim.stdin)
            version = request.cni_version
            await self._dispatch(request)
        except CniError as exc:
            return error_response(exc, version)
        except Exception as exc:
            what = f"{request.command} for {request.pod}" if request else "request"
            log.exception("cni: %s failed", what)
            error = CniError(ErrorCode.INTERNAL, "meshwire internal error", repr(exc))
            return error_response(error, version)
        return success_response(request)

    async def _dispatch(self, request: CniRequest) -> None:
        match request.command:
            case Command.ADD:
                await self._handler.add(request)
            case Command.DEL:
                await self._handler.delete(request)
            case Command.CHECK:
                await self._handler.check(request)
            case Command.STATUS:
                await self._handler.status()
            case Command.GC:
                await self._handler.gc(request)
            case Command.VERSION:
                pass


async def _read_frame(reader: asyncio.StreamReader) -> bytes | Response:
    """The request line, or the error answer when there is no complete one."""
    try:
        return await asyncio.wait_for(reader.readuntil(b"\n"), REQUEST_READ_TIMEOUT)
    except asyncio.LimitOverrunError:
        problem = f"is larger than {MAX_FRAME_BYTES} bytes"
    except asyncio.IncompleteReadError as exc:
        problem = f"ended after {len(exc.partial)} bytes without a newline"
    error = CniError(ErrorCode.DECODE_FAILURE, f"request from the CNI shim {problem}")
    return error_response(error, LATEST_VERSION)


def _short(dir_fd: int, name: str) -> str:
    """An AF_UNIX address for `name` in the directory open as `dir_fd`, short whatever
    the directory's path."""
    return f"/proc/self/fd/{dir_fd}/{name}"


def _bind_private(directory: str, dir_fd: int, name: str) -> socket.socket:
    """A Unix socket bound at `name` in `directory` (open as `dir_fd`), mode 0600 before
    anyone can reach it: bound in a fresh 0700 directory beside it, then renamed."""
    staging = tempfile.mkdtemp(prefix=".cni-", dir=directory)  # mode 0700
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        staging_fd = os.open(staging, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            sock.bind(_short(staging_fd, name))
            os.chmod(name, 0o600, dir_fd=staging_fd)
            os.rename(name, name, src_dir_fd=staging_fd, dst_dir_fd=dir_fd)
        finally:
            os.close(staging_fd)
    except BaseException:
        sock.close()
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return sock


def _remove_stale(path: str, address: str) -> None:
    """Remove the socket at `path` (reached at `address`) if no daemon serves it."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise EndpointError(f"cni.socket {path} exists and is not a socket; not removing it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(address)
    except OSError:
        os.unlink(path)
        return
    finally:
        probe.close()
    raise EndpointError(f"cni.socket {path}: another daemon is listening on it")
