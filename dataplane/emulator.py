"""Link emulation in a worker: the C emulator (`cext/emul.c`) and what drives it.

`Emulator` is the C state machine of one link end's impairments, with time
passed in: the statistical tests drive it frame by frame with a fixed seed.
`Pump` moves an impaired end's frames for a worker: it reads the end's TAP
into the emulator when the TAP is readable and writes the due frames to
`out_fd`, waking on a timerfd at the next frame's release time: the socket the
wire's sender reads (a cross-node link), or the far end's TAP itself (a
same-node link, TAP to TAP; see worker.py). Frames stay in C throughout.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, fields
from typing import Any

from meshwire.base.impairments import Params
from meshwire.dataplane._wirec import ffi, lib

# Queue bounds of one end: past them a frame is dropped (counted as overflow).
# 20,000 frames hold 20 ms of delay at 1M frames/s; 64 MiB, a second of 500 Mbit/s.
MAX_FRAMES = 20_000
MAX_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class EmulCounters:
    frames: int = 0
    passed: int = 0
    dropped: int = 0
    delayed: int = 0
    corrupted: int = 0
    duplicated: int = 0
    reordered: int = 0
    overflow: int = 0
    # Bytes of the frames pushed, and of those popped.
    bytes: int = 0
    passed_bytes: int = 0

    def as_list(self) -> list[int]:
        return [getattr(self, f.name) for f in fields(self)]


def _ppm(pct: float) -> int:
    return round(pct * 10_000)


class Emulator:
    def __init__(self, seed: int, max_frames: int = MAX_FRAMES, max_bytes: int = MAX_BYTES) -> None:
        handle = lib.mw_emul_new(seed & (2**64 - 1), max_frames, max_bytes)
        if handle == ffi.NULL:
            raise MemoryError("emulator: no memory")
        self.handle: Any = ffi.gc(handle, lib.mw_emul_free)
        self._params: Any = ffi.new("mw_emul_params *")
        self._counters: Any = ffi.new("mw_emul_counters *")
        self._buf: Any = ffi.new("uint8_t[]", 65600)
        self.params = Params()

    def set(self, params: Params) -> None:
        p = self._params
        p.delay_ns = round(params.delay_ms * 1e6)
        p.jitter_ns = round(params.jitter_ms * 1e6)
        p.loss_ppm = _ppm(params.loss_pct)
        p.corrupt_ppm = _ppm(params.corrupt_pct)
        p.duplicate_ppm = _ppm(params.duplicate_pct)
        p.reorder_ppm = _ppm(params.reorder_pct)
        p.rate_bytes_per_s = round(params.rate_mbps * 1e6 / 8)
        lib.mw_emul_set(self.handle, p)
        self.params = params

    def push(self, now_ns: int, frame: bytes, skip: int = 0) -> int:
        return int(lib.mw_emul_push(self.handle, now_ns, frame, len(frame), skip))

    def next_release(self) -> int | None:
        """The next frame's release time (ns); None if nothing is queued."""
        release = int(lib.mw_emul_next(self.handle))
        return None if release == 2**64 - 1 else release

    def pop(self, now_ns: int) -> bytes | None:
        n = int(lib.mw_emul_pop(self.handle, now_ns, self._buf, len(self._buf)))
        return bytes(ffi.buffer(self._buf, n)) if n else None

    @property
    def queued(self) -> int:
        return int(lib.mw_emul_queued(self.handle))

    def counters(self) -> EmulCounters:
        lib.mw_emul_read_counters(self.handle, self._counters)
        c = self._counters
        return EmulCounters(
            c.frames,
            c.passed,
            c.dropped,
            c.delayed,
            c.corrupted,
            c.duplicated,
            c.reordered,
            c.overflow,
            c.bytes,
            c.passed_bytes,
        )


def _timerfd() -> int:
    # timerfd_create through the C library: Python's os.timerfd_create is 3.13+.
    fd = int(lib.mw_emul_timerfd())
    if fd < 0:
        raise OSError(ffi.errno, os.strerror(ffi.errno))
    return fd


class Pump:
    """Moves one impaired end's frames from `in_fd` through an emulator to `out_fd`.

    Both fds stay the caller's; `skip` leading bytes of each frame (the TAP's
    virtio-net header) are never corrupted. `close` stops watching and frees the
    timer; frames still queued are dropped.
    """

    def __init__(self, in_fd: int, out_fd: int, params: Params, seed: int, skip: int) -> None:
        self.in_fd = in_fd
        self.out_fd = out_fd
        self._skip = skip
        self.emulator = Emulator(seed)
        self.emulator.set(params)
        self._timer = _timerfd()
        self._armed = 0
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(in_fd, self._on_input)
        self._loop.add_reader(self._timer, self._on_timer)

    def set(self, params: Params) -> None:
        self.emulator.set(params)

    def read_from(self, in_fd: int) -> None:
        """Reads frames from `in_fd` from now on (the caller closes the old one after)."""
        if in_fd == self.in_fd or self._timer < 0:
            return
        self._loop.remove_reader(self.in_fd)
        self.in_fd = in_fd
        self._loop.add_reader(in_fd, self._on_input)

    def write_to(self, out_fd: int) -> None:
        """Writes due frames to `out_fd` from now on (the caller closes the old one after)."""
        self.out_fd = out_fd

    def _on_input(self) -> None:
        if (
            lib.mw_emul_pump(
                self.emulator.handle, lib.mw_emul_now(), self.in_fd, self.out_fd, self._skip
            )
            < 0
        ):
            # The TAP failed (its netns is gone): control removes or replaces the wire.
            self._loop.remove_reader(self.in_fd)
        self._arm()

    def _on_timer(self) -> None:
        lib.mw_emul_timer_read(self._timer)
        self._armed = 0
        lib.mw_emul_pump(self.emulator.handle, lib.mw_emul_now(), -1, self.out_fd, self._skip)
        self._arm()

    def _arm(self) -> None:
        release = self.emulator.next_release()
        if release is None or release == self._armed:
            return
        self._armed = release
        lib.mw_emul_timer_set(self._timer, release)

    def close(self) -> None:
        """Idempotent."""
        if self._timer < 0:
            return
        self._loop.remove_reader(self.in_fd)
        self._loop.remove_reader(self._timer)
        os.close(self._timer)
        self._timer = -1
