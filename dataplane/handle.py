"""Control's handle on one worker process: start it, hand it wires, read its reports.

The worker supervisor in control owns the policy (which wire goes to which
worker, restarting a dead worker and handing it its fds again); this is the
mechanism. Commands are answered in order, so each call awaits its own ack.
The TAP fd passed to `add_wire` stays open in control (the worker gets its own
reference through SCM_RIGHTS).

A worker with a run directory (`WorkerConfig.run_dir`) is started in a session
of its own and outlives control; `adopt` connects to one found running there,
checks who it is (the socket peer's pid and start time against its Hello) and
which config it runs, and returns it with the wires it holds. Such a worker is
not control's child: it is waited for through a pidfd, its exit status is not
known (-1), and `detach` leaves it running.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import socket
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from meshwire.dataplane import fdpass, messages, rundir
from meshwire.dataplane.counters import Counters
from meshwire.dataplane.worker import WorkerConfig, generation


class WorkerError(RuntimeError):
    """The worker refused a command (the message names the wire), or died."""


class _Process(Protocol):
    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


class _Adopted:
    """A worker process that is not control's child, named by pid and start time."""

    def __init__(self, pid: int, started: int) -> None:
        self.pid = pid
        self._started = started
        self.returncode: int | None = None
        try:
            self._pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            self._pidfd = -1
            self.returncode = -1
        if rundir.start_time(pid) != started:  # the pid was reused before the pidfd
            self._gone()

    async def wait(self) -> int:
        """Its exit; -1 at once if it is gone or no longer followed (`forget`)."""
        if self.returncode is not None or self._pidfd < 0:
            return -1
        loop = asyncio.get_running_loop()
        exited: asyncio.Future[None] = loop.create_future()
        loop.add_reader(self._pidfd, _settle, exited)
        try:
            await exited
        finally:
            loop.remove_reader(self._pidfd)
        self._gone()
        return -1

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: signal.Signals) -> None:
        if self.returncode is None and self._pidfd >= 0:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, sig)

    def forget(self) -> None:
        """Stop following the process (it goes on running)."""
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1

    def _gone(self) -> None:
        self.returncode = -1
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclass(frozen=True, slots=True)
class Adoption:
    """A running worker taken over, and the wires it holds: each AddWire as control
    sent it, with an fd on its TAP that the caller owns."""

    handle: WorkerHandle
    wires: list[tuple[messages.AddWire, int]]


class WorkerHandle:
    def __init__(self, process: _Process, sock: socket.socket) -> None:
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
        # What an adopted worker said first, and the wires it holds (fds ours).
        self.hello: messages.Hello | None = None
        self._held: list[tuple[messages.AddWire, int]] = []
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
                start_new_session=bool(config.run_dir),
            )
        ours.setblocking(False)
        handle = cls(process, ours)
        try:
            handle.data_port = await asyncio.wait_for(asyncio.shield(handle._ready), ready_within)
        except (TimeoutError, WorkerError):
            await handle.stop()
            raise WorkerError(f"worker pid {process.pid} did not start serving") from None
        return handle

    @classmethod
    async def adopt(cls, config: WorkerConfig, within: float = 20.0) -> Adoption | None:
        """The worker `config.index` running in `config.run_dir`, taken over.

        None if there is none (a stale socket is removed) or if it is not
        certainly a worker (its Hello does not name the socket's peer), which is
        then left alone. A worker of another generation (another config or code)
        is stopped, and None returned: start a new one.
        """
        sock = rundir.connect(config.run_dir, config.index)
        if sock is None:
            return None
        pid = rundir.peer_pid(sock)
        started = rundir.start_time(pid)
        if started is None:
            sock.close()
            return None
        sock.setblocking(False)
        handle = cls(_Adopted(pid, started), sock)
        try:
            handle.data_port = await asyncio.wait_for(asyncio.shield(handle._ready), within)
        except (TimeoutError, WorkerError):
            handle._release()
            return None
        hello = handle.hello
        if hello is None or (hello.pid, hello.start_time) != (pid, started):
            handle._release()
            return None
        if hello.generation != generation(config):
            handle._release()
            await handle.stop()
            return None
        held, handle._held = handle._held, []
        return Adoption(handle, held)

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

    def detach(self) -> None:
        """Let the worker go on without this control process (it needs a run directory)."""
        self._close()
        if isinstance(self._process, _Adopted):
            self._process.forget()

    def _release(self) -> None:
        """Close the fds of wires handed over and not taken, and the connection."""
        for _, fd in self._held:
            os.close(fd)
        self._held = []
        self._close()

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
            if not data:
                for fd in fds:
                    os.close(fd)
                self._close()
                return
            try:
                message = messages.decode(data)
            except messages.MessageError:
                message = None
            if isinstance(message, messages.AddWire) and len(fds) == 1 and not self._ready.done():
                self._held.append((message, fds[0]))  # a wire an adopted worker holds
                continue
            for fd in fds:
                os.close(fd)
            if message is not None:
                self._dispatch(message)

    def _dispatch(self, message: messages.Message) -> None:
        if isinstance(message, messages.Hello):
            self.hello = message
        elif isinstance(message, messages.Ready) and not self._ready.done():
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
