"""A dataplane worker process: moves the frames of its gRPC wires (docs/design.md §1, §5).

Control starts it as a fresh interpreter (`python -m meshwire.dataplane.worker
--control-fd N --config JSON`, see handle.py): never a bare fork, since control
has gRPC threads, and unlike multiprocessing's spawn it does not re-import
control's main module. Fd N is one end of a SOCK_SEQPACKET socket pair; over it
control sends AddWire/RemoveWire (each AddWire with the wire's TAP fd), and the
worker sends Ready (with its data port), a WireAck per command, and every
`report_interval` seconds a StreamReport and WireReports (messages.py).

The worker serves the Wire service on its data port, writing received batches
to its TAPs (receiver.py), and keeps one outgoing stream per (namespace, peer
node, peer port), refcounted by its wires (streams.py, sender.py). The two ends
of a same-node link under emulation (AddWire `local`) are both this worker's:
once both are added, each end's frames go from its TAP through its emulator
(its impairments, emulator.py) straight into the other end's TAP, with no
stream and no socket. Both speak
gRPC over HTTP/2 in C (libnghttp2), so no frame passes through Python and the
worker loads no gRPC library. It exits on SIGTERM or SIGINT; the TAPs stay,
since they are persistent.

Without `run_dir` the worker is its control process's: it exits when control's
end of the socket closes. With `run_dir` it outlives control (non-stop
forwarding): control spawns it in a session of its own, it moves itself into
`cgroup` under `cgroup_root` if set (cgroup.py), and it listens on its socket in
`run_dir` (rundir.py) for the next control process, which it tells who it is
(Hello: pid, start time, `generation` of its config) and every wire it holds
(an AddWire with the TAP fd, as control sent it), then Ready. The last control
to connect is the one it answers. A worker with no control process and no wire
for `orphan_grace` seconds exits: one with wires goes on carrying them.

A worker that outlives control may outlive the files it started from: a DaemonSet
pod's snapshot is removed when the pod is replaced, and the worker is left in an
empty root. So it reads every file it will need before it serves (`_load_now`):
after Ready it opens none.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass

import uvloop

from meshwire.base import defaults, hostport
from meshwire.base.impairments import Params
from meshwire.base.logs import LogFormat, setup_logging
from meshwire.base.netns_thread import setns
from meshwire.dataplane import cgroup, fdpass, messages, preface, rundir
from meshwire.dataplane.counters import Counters
from meshwire.dataplane.emulator import Pump
from meshwire.dataplane.receiver import Listener
from meshwire.dataplane.sender import Sender
from meshwire.dataplane.streams import StreamKey, Streams
from meshwire.dataplane.tap import VNET_HDR_LEN, tap_info
from meshwire.dataplane.wirec import ID_LIMIT, WireTable, WireTableError

# Named, not __name__: the worker runs as `python -m`, where __name__ is "__main__".
log = logging.getLogger("meshwire.dataplane.worker")


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    # Netns path the worker serves in; empty: control's own (the node's).
    netns: str = ""
    # Also the node's identity in the wire preface: its address, as its peers dial it.
    listen_host: str = "127.0.0.1"
    # 0: any free port; the one bound is reported in Ready.
    data_port: int = 0
    # Frames per gRPC message at most (config `dataplane.batch_frames`); 1 turns batching off.
    batch_frames: int = defaults.BATCH_FRAMES
    # Bytes per batch buffer: room for many MTU frames and a few 64 KiB TSO frames.
    batch_bytes: int = 1 << 20
    report_interval: float = defaults.REPORT_INTERVAL
    id_limit: int = ID_LIMIT
    # The daemon's `log.level` and `log.format`, its node name, and this worker's
    # index among the node's workers (named in every log line).
    log_level: str = defaults.LOG_LEVEL
    log_format: LogFormat = defaults.LOG_FORMAT
    node: str = ""
    index: int = 0
    # The wire key file (config `auth.wire_key`): every connection, both ways, passes the
    # authenticated preface (preface.py) first. Empty: no preface, anyone is trusted.
    wire_key: str = ""
    # With a wire key: the streams this worker opens encrypt their records, not only seal
    # them (config `auth.wire_encrypt`, cext/seal.h).
    wire_encrypt: bool = True
    # Seconds an accepted connection has to pass the preface (`auth.wire_preface_timeout`).
    preface_timeout: float = preface.TIMEOUT
    # Config `dataplane.run_dir`: where the worker waits for the next control process
    # (see the module doc). Empty: the worker exits with its control process.
    run_dir: str = ""
    # Config `dataplane.cgroup_root` and `dataplane.worker_cgroup`: the cgroup
    # hierarchy and the cgroup in it the worker moves into. Empty cgroup: it stays.
    cgroup_root: str = defaults.CGROUP_ROOT
    cgroup: str = ""
    # Config `dataplane.orphan_grace`: seconds without control and without wires to exit.
    orphan_grace: float = defaults.ORPHAN_GRACE


# Bumped when a worker of older code could not serve a newer control process.
PROTOCOL = 1


def generation(config: WorkerConfig) -> str:
    """A digest of the config (and the protocol): a worker of another generation is replaced."""
    text = json.dumps([PROTOCOL, dataclasses.asdict(config)], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _load_now() -> None:
    """Loads what Python would otherwise load from files on first use, later: the IDNA
    codec, which every connect's address resolution looks up (uvloop's getaddrinfo)."""
    codecs.lookup("idna")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m meshwire.dataplane.worker")
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--config", required=True, help="WorkerConfig as a JSON object")
    args = parser.parse_args(argv)
    try:
        config = WorkerConfig(**json.loads(args.config))
    except (TypeError, ValueError) as exc:
        parser.error(f"--config: {exc}")
    control = socket.socket(fileno=args.control_fd)
    _load_now()
    if config.netns:
        setns(config.netns)
    setup_logging(config.log_level, config.log_format, config.node, worker=config.index)
    if config.run_dir and config.cgroup:
        try:
            cgroup.join(config.cgroup_root, config.cgroup)
        except cgroup.CgroupError as exc:
            log.warning("%s; staying in the cgroup of the process that started it", exc)
    try:
        keys = preface.Keyring(config.wire_key) if config.wire_key else None
    except ValueError as exc:
        log.error("auth.wire_key: %s", exc)
        return 3
    try:
        uvloop.run(Worker(config, control, keys).serve())
    except CannotListen as exc:
        # Control sees the exit before Ready and starts the worker again, later.
        log.error("%s", exc)
        return 3
    return 0


class CannotListen(Exception):
    """The worker's data port cannot be bound (taken, or not an address of this host)."""


# Socket buffer of an impaired wire's emulator output: room for a burst of 64 KiB
# TSO frames between the emulator writing them and the sender reading them.
EMULATED_BUFFER = 4 << 20


@dataclass(slots=True)
class _Emulated:
    """An impaired wire's emulator: it reads the TAP and writes due frames to `out`,
    which the wire's sender reads through `source` (a SOCK_SEQPACKET pair)."""

    pump: Pump
    source: socket.socket
    out: socket.socket

    def close(self) -> None:
        self.pump.close()
        self.source.close()
        self.out.close()


@dataclass(slots=True)
class _Local:
    """One end of a same-node link: its TAP, and once its far end (a wire of this
    worker whose far end is this one) is here too, the pump that moves its frames
    through its impairments into the far end's TAP."""

    fd: int
    peer_wire_id: int
    params: Params
    pump: Pump | None = None

    def close_pump(self) -> None:
        if self.pump is not None:
            self.pump.close()
            self.pump = None


@dataclass(slots=True)
class _Wire:
    fd: int
    peer_wire_id: int
    emulated: _Emulated | None = None

    @property
    def source(self) -> int:
        """The fd the wire's sender reads its frames from."""
        return self.emulated.source.fileno() if self.emulated is not None else self.fd


class Worker:
    def __init__(
        self, config: WorkerConfig, control: socket.socket, keys: preface.Keyring | None = None
    ) -> None:
        self._config = config
        self._keys = keys
        # The control process's socket; None while there is none (with `run_dir` only).
        self._control: socket.socket | None = control
        # Where the next control process connects (with `run_dir`).
        self._door: socket.socket | None = None
        # time.monotonic() since when there has been no control process.
        self._orphaned_at = 0.0
        self._port = 0
        # Sends the outbox to control; started anew for each control process.
        self._writer: asyncio.Task[None] | None = None
        self._table = WireTable(config.id_limit)
        self._wires: dict[int, _Wire] = {}
        # Same-node link ends by wire id (AddWire `local`); never also in `_wires`.
        self._locals: dict[int, _Local] = {}
        # The AddWire of every wire in `_wires` or `_locals`, told to an adopting control.
        self._commands: dict[int, messages.AddWire] = {}
        self._streams: Streams[Sender] = Streams(self._open_stream)
        self._listener = Listener(
            self._table, keys, hostport.canonical(config.listen_host), config.preface_timeout
        )
        self._stopping = asyncio.Event()
        self._closing: set[asyncio.Task[None]] = set()
        # Datagrams to control, in order (acks must follow their commands), each with
        # the fds it carries (owned by the queue until sent).
        self._outbox: asyncio.Queue[tuple[bytes, list[int]]] = asyncio.Queue()

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stopping.set)
        assert self._control is not None
        self._control.setblocking(False)
        address = hostport.join(self._config.listen_host, self._config.data_port)
        try:
            port = self._listener.start(self._config.listen_host, self._config.data_port)
        except OSError as exc:
            raise CannotListen(f"cannot serve the Wire service on {address}: {exc}") from None
        self._port = port
        log.debug("serving the Wire service on %s", hostport.join(self._config.listen_host, port))
        if self._config.run_dir:
            self._door = rundir.listen(self._config.run_dir, self._config.index)
            self._door.setblocking(False)
            loop.add_reader(self._door.fileno(), self._on_connect)
        self._writer = loop.create_task(self._write_loop())
        self._say(messages.Ready(port))
        loop.add_reader(self._control.fileno(), self._on_command)
        reports = loop.create_task(self._report_loop())
        try:
            await self._stopping.wait()
        finally:
            self._drop_control()
            if self._door is not None:
                loop.remove_reader(self._door.fileno())
                self._door.close()
                rundir.remove(self._config.run_dir, self._config.index)
            reports.cancel()
            self._writer.cancel()
            self._listener.close()
            await asyncio.gather(*(sender.close() for _, sender in self._streams.items()))
            await asyncio.gather(*self._closing)
            for wire in self._wires.values():
                if wire.emulated is not None:
                    wire.emulated.close()
                os.close(wire.fd)
            for end in self._locals.values():
                end.close_pump()
                os.close(end.fd)

    def _open_stream(self, key: StreamKey) -> Sender:
        log.debug("stream %s: opening for its first wire", key)
        return Sender(
            key,
            self._table,
            lambda wire_id: self._wires[wire_id].source,
            self._config.batch_frames,
            self._config.batch_bytes,
            self._keys,
            hostport.canonical(self._config.listen_host),
            self._config.wire_encrypt,
        )

    def _on_command(self) -> None:
        while self._control is not None:
            try:
                data, fds = fdpass.receive(self._control)
            except BlockingIOError:
                return
            except OSError as exc:
                self._lose_control(f"control socket: {exc}")
                return
            if not data:
                self._lose_control("control closed its socket")
                return
            self._say(self._handle(data, fds))

    def _lose_control(self, why: str) -> None:
        """Control is gone: without `run_dir` the worker stops, with it it carries on."""
        if not self._config.run_dir:
            log.info("%s; stopping", why)
            self._stopping.set()
            return
        log.info("%s; forwarding on until the next control process connects", why)
        self._drop_control()

    def _drop_control(self) -> None:
        if self._control is None:
            return
        asyncio.get_running_loop().remove_reader(self._control.fileno())
        self._control.close()
        self._control = None
        self._orphaned_at = time.monotonic()
        while not self._outbox.empty():
            for fd in self._outbox.get_nowait()[1]:
                os.close(fd)
        if self._writer is not None and not self._stopping.is_set():
            # It may be waiting on the closed socket: the next control gets a new one.
            self._writer.cancel()
            self._writer = asyncio.get_running_loop().create_task(self._write_loop())

    def _on_connect(self) -> None:
        """A control process connected: it replaces the last one and is told everything."""
        assert self._door is not None
        try:
            sock, _ = self._door.accept()
        except (BlockingIOError, ConnectionAbortedError):
            return
        if rundir.peer_uid(sock) != os.getuid():
            log.warning("refused a control connection from another user")
            sock.close()
            return
        if self._control is not None:
            log.info("a new control process connected; leaving the last one")
        self._drop_control()
        sock.setblocking(False)
        self._control = sock
        started = rundir.start_time(os.getpid()) or 0
        self._say(messages.Hello(os.getpid(), started, generation(self._config)))
        for wire_id, wire in self._wires.items():
            self._say(self._commands[wire_id], [os.dup(wire.fd)])
        for wire_id, end in self._locals.items():
            self._say(self._commands[wire_id], [os.dup(end.fd)])
        self._say(messages.Ready(self._port))
        asyncio.get_running_loop().add_reader(sock.fileno(), self._on_command)
        log.info("adopted by a control process: %d wires", len(self._wires) + len(self._locals))

    def _handle(self, data: bytes, fds: list[int]) -> messages.WireAck:
        try:
            command = messages.decode(data)
        except messages.MessageError as exc:
            for fd in fds:
                os.close(fd)
            return messages.WireAck(0, str(exc))
        if isinstance(command, messages.AddWire) and len(fds) == 1:
            if command.local:
                ack = self._add_local(command, fds[0])
            else:
                self._remove_local(command.wire_id)
                ack = self._add(command, fds[0])
            if command.wire_id in self._wires or command.wire_id in self._locals:
                self._commands[command.wire_id] = command
            else:
                self._commands.pop(command.wire_id, None)
            return ack
        for fd in fds:
            os.close(fd)
        if isinstance(command, messages.RemoveWire):
            self._remove(command.wire_id)
            self._remove_local(command.wire_id)
            self._commands.pop(command.wire_id, None)
            return messages.WireAck(command.wire_id)
        wire_id = getattr(command, "wire_id", 0)
        return messages.WireAck(wire_id, f"{command!r}: not a command, or AddWire without one fd")

    def _add(self, command: messages.AddWire, fd: int) -> messages.WireAck:
        os.set_blocking(fd, False)  # a blocking TAP would stall every wire of the worker
        try:
            # With keys a stream is bound to the node it authenticated as (its address):
            # it delivers only to the wires whose far end is on that node.
            peer = hostport.canonical(command.peer_node) if self._keys is not None else ""
            tag = self._table.tag(command.namespace, peer)
            self._table.set(command.wire_id, fd, tag, command.peer_wire_id)
        except (WireTableError, MemoryError) as exc:
            os.close(fd)
            return messages.WireAck(command.wire_id, str(exc))
        old = self._wires.get(command.wire_id)
        retired = old.emulated if old is not None else None
        problem = ""
        try:
            emulated = self._emulate(command, fd, retired)
        except OSError as exc:
            # No emulator (out of fds): the wire carries its frames unimpaired, and the
            # refusal makes control send the command again later.
            self._table.set_source(command.wire_id, -1)
            emulated, problem = None, f"wire {command.wire_id}: impairments: {exc}"
        self._wires[command.wire_id] = _Wire(fd, command.peer_wire_id, emulated)
        key = StreamKey(command.namespace, command.peer_node, command.peer_port)
        self._close_later(self._streams.attach(command.wire_id, key))
        # After the sender let go of its fds: a closed fd cannot leave an epoll set.
        if retired is not None and retired is not emulated:
            retired.close()
        if old is not None and old.fd != fd:
            os.close(old.fd)
        return messages.WireAck(command.wire_id, problem)

    def _emulate(
        self, command: messages.AddWire, fd: int, old: _Emulated | None
    ) -> _Emulated | None:
        """The wire's emulator as `command` asks: `old` with new parameters, reading the
        new fd (each AddWire brings its own, on the same TAP or a new one), so its queue
        and counters carry on; a new one; or none. Points the table at it. The caller
        closes `old` if it is not the one returned."""
        params = Params(*command.impairments)
        if old is not None and not params:
            old.pump.close()  # stop reading the TAP now; its sockets go later
            old = None
        if old is not None:
            old.pump.set(params)
            old.pump.read_from(fd)
            emulated = old
        elif params:
            source, out = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                for end in (source, out):
                    end.setblocking(False)
                    end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, EMULATED_BUFFER)
                    end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, EMULATED_BUFFER)
                skip = VNET_HDR_LEN if tap_info(fd)[1] else 0
                pump = Pump(fd, out.fileno(), params, command.wire_id, skip)
            except BaseException:
                source.close()
                out.close()
                raise
            emulated = _Emulated(pump, source, out)
        else:
            emulated = None
        self._table.set_source(
            command.wire_id, -1 if emulated is None else emulated.source.fileno()
        )
        return emulated

    def _add_local(self, command: messages.AddWire, fd: int) -> messages.WireAck:
        """Adds or changes a same-node link end; joins it TAP to TAP with its far end
        once both are here. New impairments apply in place (the emulator keeps its
        queue); a new fd is read (and written by the far end) from now on."""
        os.set_blocking(fd, False)
        self._remove(command.wire_id)  # it was a cross-node wire until now
        end = self._locals.get(command.wire_id)
        if end is not None and end.peer_wire_id != command.peer_wire_id:
            self._remove_local(command.wire_id)
            end = None
        params = Params(*command.impairments)
        retired = -1
        if end is None:
            end = _Local(fd, command.peer_wire_id, params)
            self._locals[command.wire_id] = end
        else:
            retired = end.fd if end.fd != fd else -1
            end.fd, end.params = fd, params
        far = self._locals.get(end.peer_wire_id)
        problem = ""
        if far is not None and far.peer_wire_id == command.wire_id:
            try:
                self._pump(command.wire_id, end, far)
                self._pump(end.peer_wire_id, far, end)
            except OSError as exc:
                # No pump (out of fds): the link carries nothing yet, and the refusal
                # makes control send the command again later.
                end.close_pump()
                far.close_pump()
                problem = f"wire {command.wire_id}: joining its same-node far end: {exc}"
        if retired >= 0:
            os.close(retired)  # after the pumps let go of it
        return messages.WireAck(command.wire_id, problem)

    @staticmethod
    def _pump(wire_id: int, source: _Local, sink: _Local) -> None:
        """Moves `source`'s frames through its impairments into `sink`'s TAP."""
        if source.pump is None:
            skip = VNET_HDR_LEN if tap_info(source.fd)[1] else 0
            source.pump = Pump(source.fd, sink.fd, source.params, wire_id, skip)
            return
        source.pump.set(source.params)
        source.pump.read_from(source.fd)
        source.pump.write_to(sink.fd)

    def _remove_local(self, wire_id: int) -> None:
        end = self._locals.pop(wire_id, None)
        if end is None:
            return
        end.close_pump()
        far = self._locals.get(end.peer_wire_id)
        if far is not None and far.peer_wire_id == wire_id:
            far.close_pump()  # it wrote to the TAP closed here
        os.close(end.fd)

    def _remove(self, wire_id: int) -> None:
        wire = self._wires.get(wire_id)
        if wire is None:
            return
        self._close_later(self._streams.detach(wire_id))
        del self._wires[wire_id]
        self._table.clear(wire_id)
        if wire.emulated is not None:
            wire.emulated.close()
        os.close(wire.fd)

    def _close_later(self, sender: Sender | None) -> None:
        if sender is not None:
            log.debug("stream %s: no wire left; closing", sender.key)
            task = asyncio.get_running_loop().create_task(sender.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def _report_loop(self) -> None:
        while True:
            if self._control is None:
                self._exit_if_forgotten()
            elif self._outbox.empty():  # control is keeping up: no report piles up
                self._report()
            await asyncio.sleep(self._config.report_interval)

    def _exit_if_forgotten(self) -> None:
        """No control for `orphan_grace` and no wire: nothing will ever use this worker."""
        if self._wires or self._locals:
            return
        if time.monotonic() - self._orphaned_at >= self._config.orphan_grace:
            log.info(
                "no control process and no wire for %.0fs; stopping", self._config.orphan_grace
            )
            self._stopping.set()

    def _report(self) -> None:
        refs = self._streams.refs()
        streams = tuple(
            messages.StreamState(*key, refs[key], sender.batches)
            for key, sender in self._streams.items()
        )
        self._say(
            messages.StreamReport(
                streams,
                self._listener.incoming,
                self._table.unknown,
                self._listener.malformed,
                self._listener.refusals.count,
                sum(end.pump is not None for end in self._locals.values()) // 2,
            )
        )
        wires = []
        for wire_id, wire in self._wires.items():
            counters = self._table.counters(wire_id)
            if counters is None:
                continue
            if wire.emulated is not None:
                counters = _with_emulation(counters, wire.emulated.pump)
            wires.append((wire_id, counters))
        for wire_id, end in self._locals.items():
            far = self._locals.get(end.peer_wire_id)
            wires.append((wire_id, _local_counters(end, far)))
        for report in messages.wire_reports(wires):
            self._say(report)

    def _say(self, message: messages.Message, fds: list[int] | None = None) -> None:
        """Queue `message` (and `fds`, closed once sent) for control; with no control,
        drop them."""
        if self._control is None:
            for fd in fds or ():
                os.close(fd)
            return
        self._outbox.put_nowait((messages.encode(message), fds or []))

    async def _write_loop(self) -> None:
        while True:
            data, fds = await self._outbox.get()
            control = self._control
            try:
                if control is not None:
                    await _send(control, data, fds)
            except OSError as exc:
                if control is self._control:
                    self._lose_control(f"control socket: {exc}")
            finally:
                for fd in fds:
                    os.close(fd)


async def _send(sock: socket.socket, data: bytes, fds: list[int]) -> None:
    """One datagram with its fds on a nonblocking socket, waiting while it is full."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            fdpass.send(sock, data, fds)
            return
        except BlockingIOError:
            writable = loop.create_future()
            loop.add_writer(sock.fileno(), writable.set_result, None)
            try:
                await writable
            finally:
                with contextlib.suppress(ValueError, OSError):
                    loop.remove_writer(sock.fileno())


def _with_emulation(counters: Counters, pump: Pump) -> Counters:
    e = pump.emulator.counters()
    return dataclasses.replace(
        counters,
        impaired_dropped=e.dropped,
        impaired_delayed=e.delayed,
        impaired_corrupted=e.corrupted,
        impaired_duplicated=e.duplicated,
        impaired_reordered=e.reordered,
        impaired_overflow=e.overflow,
    )


def _local_counters(end: _Local, far: _Local | None) -> Counters:
    """A same-node end's counters: what its emulator took from its TAP (tx) and what
    the far end's emulator wrote into it (rx). Zero until the two are joined."""
    if end.pump is None or far is None or far.pump is None:
        return Counters()
    tx, rx = end.pump.emulator.counters(), far.pump.emulator.counters()
    return _with_emulation(
        Counters(
            tx_frames=tx.frames,
            tx_bytes=tx.bytes,
            rx_frames=rx.passed,
            rx_bytes=rx.passed_bytes,
        ),
        end.pump,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
