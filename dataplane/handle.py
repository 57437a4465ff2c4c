"""Control's handle on one worker process: start it, hand it wires, read its reports.

The worker supervisor in control owns the policy (which wire goes to which
worker, restarting a dead worker and handing it its fds again); this is the
mechanism. Commands are answered in order, so each call awaits its own ack.
The TAP fd passed to `add_wire` stays open in control (the worker gets its own
reference through SCM_RIGHTS).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import socket
import sys
import time
from collections import deque

from meshwire.dataplane import fdpass, messages
from meshwire.dataplane.counters import Counters
from meshwire.dataplane.worker import WorkerConfig


class WorkerError(RuntimeError):
    """The worker refused a command (the message names the wire), or died."""


class WorkerHandle:
    def __init__(self, process: asyncio.subprocess.Process, sock: socket.socket) -> None:
        self._process = process
        self._sock = sock
        self.data_port = 0
        self._ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._acks: deque[asyncio.Future[messages.WireAck]] = deque()
        self._partial: dict[int, Counters] = {}
        # The last complete report: outgoing streams and every wire's counters.
        self.streams: messages.StreamReport | None = None
        self.wires: dict[int, Counters] = {}
        # time.monotonic() when `streams` arrived (0: never).
        self.reported_at = 0.0
        self._closed = False
        asyncio.get_running_loop().add_reader(sock.fileno(), self._on_datagram)

    @classmethod
    async def start(cls, config: WorkerConfig, ready_within: float = 20.0) -> WorkerHandle:
        """Spawns a worker and waits for it to serve; raises WorkerError if it does not."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "meshwire.dataplane.worker",
                "--control-fd",
                str(theirs.fileno()),
                "--config",
                json.dumps(dataclasses.asdict(config)),
                pass_fds=(theirs.fileno(),),
            )
        ours.setblocking(False)
        handle = cls(process, ours)
        try:
            handle.data_port = await asyncio.wait_for(asyncio.shield(handle._ready), ready_within)
        except (TimeoutError, WorkerError):
            await handle.stop()
            raise WorkerError(f"worker pid {process.pid} did not start serving") from None
        return handle

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def alive(self) -> bool:
        """False once the worker closed its socket (it exited or is exiting)."""
        return not self._closed

    async def wait(self) -> int:
        """Waits for the worker process to exit; returns its exit code."""
        code = await self._process.wait()
        self._close()
        return code

    async def add_wire(self, command: messages.AddWire, fd: int) -> None:
        """Adds or re-points a wire; raises WorkerError with the worker's reason."""
        await self._command(command, [fd])

    async def remove_wire(self, wire_id: int) -> None:
        """Removing a wire the worker does not have is success."""
        await self._command(messages.RemoveWire(wire_id), [])

    async def stop(self, grace: float = 5.0) -> int:
        """SIGTERM, then SIGKILL after `grace` seconds; returns the exit code."""
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.terminate()
        try:
            return await asyncio.wait_for(self._process.wait(), grace)
        except TimeoutError:
            self.kill()
            return await self._process.wait()
        finally:
            self._close()

    def kill(self) -> None:
        """SIGKILL: the worker's TAP fds close, the TAPs stay (control holds its own)."""
        with contextlib.suppress(ProcessLookupError):
            self._process.kill()

    async def _command(self, command: messages.Message, fds: list[int]) -> None:
        if self._closed:
            raise WorkerError(f"worker pid {self.pid} is gone")
        ack: asyncio.Future[messages.WireAck] = asyncio.get_running_loop().create_future()
        self._acks.append(ack)
        await self._send(messages.encode(command), fds)
        answer = await ack
        if answer.error:
            raise WorkerError(f"worker pid {self.pid}, wire {answer.wire_id}: {answer.error}")

    async def _send(self, data: bytes, fds: list[int]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                fdpass.send(self._sock, data, fds)
                return
            except BlockingIOError:
                writable = loop.create_future()
                loop.add_writer(self._sock.fileno(), writable.set_result, None)
                try:
                    await writable
                finally:
                    loop.remove_writer(self._sock.fileno())

    def _on_datagram(self) -> None:
        while not self._closed:
            try:
                data, fds = fdpass.receive(self._sock)
            except BlockingIOError:
                return
            except OSError:
                data, fds = b"", []
            for fd in fds:
                os.close(fd)
            if not data:
                self._close()
                return
            self._dispatch(messages.decode(data))

    def _dispatch(self, message: messages.Message) -> None:
        if isinstance(message, messages.Ready) and not self._ready.done():
            self._ready.set_result(message.data_port)
        elif isinstance(message, messages.WireAck) and self._acks:
            self._acks.popleft().set_result(message)
        elif isinstance(message, messages.StreamReport):
            self.streams = message
            self.reported_at = time.monotonic()
            self._partial = {}
        elif isinstance(message, messages.WireReport):
            self._partial.update(message.wires)
            if message.last:
                self.wires, self._partial = self._partial, {}

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        asyncio.get_running_loop().remove_reader(self._sock.fileno())
        self._sock.close()
        gone = WorkerError(f"worker pid {self.pid} closed its socket")
        if not self._ready.done():
            self._ready.set_exception(gone)
        while self._acks:
            self._acks.popleft().set_exception(gone)
