"""A dataplane worker process: moves the frames of its gRPC wires (DESIGN.md §1, §5).

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
worker loads no gRPC library. It exits on SIGTERM or SIGINT, or when control's
end of the socket closes; the TAPs stay, since control keeps its own fds and
the TAPs are persistent.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass

import uvloop

from meshwire.dataplane import defaults, fdpass, hostport, messages, preface
from meshwire.dataplane.counters import Counters
from meshwire.dataplane.emulator import Pump
from meshwire.dataplane.impairments import Params
from meshwire.dataplane.logs import LogFormat, setup_logging
from meshwire.dataplane.netns_thread import setns
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
    if config.netns:
        setns(config.netns)
    setup_logging(config.log_level, config.log_format, config.node, worker=config.index)
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
        self._control = control
        self._table = WireTable(config.id_limit)
        self._wires: dict[int, _Wire] = {}
        # Same-node link ends by wire id (AddWire `local`); never also in `_wires`.
        self._locals: dict[int, _Local] = {}
        self._streams: Streams[Sender] = Streams(self._open_stream)
        self._listener = Listener(
            self._table, keys, hostport.canonical(config.listen_host), config.preface_timeout
        )
        self._stopping = asyncio.Event()
        self._closing: set[asyncio.Task[None]] = set()
        # Datagrams to control, in order (acks must follow their commands).
        self._outbox: asyncio.Queue[bytes] = asyncio.Queue()

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stopping.set)
        self._control.setblocking(False)
        address = hostport.join(self._config.listen_host, self._config.data_port)
        try:
            port = self._listener.start(self._config.listen_host, self._config.data_port)
        except OSError as exc:
            raise CannotListen(f"cannot serve the Wire service on {address}: {exc}") from None
        log.debug("serving the Wire service on %s", hostport.join(self._config.listen_host, port))
        writer = loop.create_task(self._write_loop())
        self._say(messages.Ready(port))
        loop.add_reader(self._control.fileno(), self._on_command)
        reports = loop.create_task(self._report_loop())
        try:
            await self._stopping.wait()
        finally:
            loop.remove_reader(self._control.fileno())
            reports.cancel()
            writer.cancel()
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
        while True:
            try:
                data, fds = fdpass.receive(self._control)
            except BlockingIOError:
                return
            except OSError as exc:
                log.error("control socket: %s; stopping", exc)
                self._stopping.set()
                return
            if not data:
                log.info("control closed its socket; stopping")
                self._stopping.set()
                return
            self._say(self._handle(data, fds))

    def _handle(self, data: bytes, fds: list[int]) -> messages.WireAck:
        try:
            command = messages.decode(data)
        except messages.MessageError as exc:
            for fd in fds:
                os.close(fd)
            return messages.WireAck(0, str(exc))
        if isinstance(command, messages.AddWire) and len(fds) == 1:
            if command.local:
                return self._add_local(command, fds[0])
            self._remove_local(command.wire_id)
            return self._add(command, fds[0])
        for fd in fds:
            os.close(fd)
        if isinstance(command, messages.RemoveWire):
            self._remove(command.wire_id)
            self._remove_local(command.wire_id)
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
            if self._outbox.empty():  # control is keeping up: no report piles up
                self._report()
            await asyncio.sleep(self._config.report_interval)

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

    def _say(self, message: messages.Message) -> None:
        self._outbox.put_nowait(messages.encode(message))

    async def _write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            data = await self._outbox.get()
            try:
                await loop.sock_sendall(self._control, data)
            except OSError as exc:
                log.info("control socket: %s; stopping", exc)
                self._stopping.set()
                return


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
