"""The event-loop side of a C connection (cext/h2wire.h): what to watch, from the bits it returns.

Every call into a sender or receiver returns MW_IO bits: WRITE (output waits for
the socket), TAPS (a sender is ready for its TAPs' next frames) and DONE. A
`FdWatch` keeps the loop's readers and writers in step with the last bits, arming
or disarming only what changed, and calls `on_done` once. The socket stays
watched for reading until DONE.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from meshwire.dataplane._wirec import lib

WRITE = int(lib.MW_IO_WRITE)
TAPS = int(lib.MW_IO_TAPS)
DONE = int(lib.MW_IO_DONE)

Step = Callable[[], int]


class FdWatch:
    """Runs `on_readable`, `on_writable` and `on_taps` (each returns the connection's next
    bits) as the socket `fd` and the TAPs' epoll fd `taps_fd` get ready."""

    def __init__(
        self,
        fd: int,
        on_readable: Step,
        on_writable: Step,
        on_done: Callable[[], None],
        taps_fd: int = -1,
        on_taps: Step | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._fd = fd
        self._taps_fd = taps_fd
        self._on_readable = on_readable
        self._on_writable = on_writable
        self._on_taps = on_taps
        self._on_done = on_done
        self._writing = False
        self._tapping = False
        self._done = False
        self._loop.add_reader(fd, self._step, on_readable)

    @property
    def done(self) -> bool:
        return self._done

    def apply(self, bits: int) -> None:
        """Follows the bits a call into the connection returned."""
        if self._done:
            return
        if bits & DONE:
            self.stop()
            self._on_done()
            return
        writing = bool(bits & WRITE)
        if writing != self._writing:
            if writing:
                self._loop.add_writer(self._fd, self._step, self._on_writable)
            else:
                self._loop.remove_writer(self._fd)
            self._writing = writing
        tapping = bool(bits & TAPS) and self._on_taps is not None
        if tapping != self._tapping:
            if tapping and self._on_taps is not None:
                self._loop.add_reader(self._taps_fd, self._step, self._on_taps)
            else:
                self._loop.remove_reader(self._taps_fd)
            self._tapping = tapping

    def stop(self) -> None:
        """Stops watching; the connection gets no further call. Idempotent."""
        if self._done:
            return
        self._done = True
        self._loop.remove_reader(self._fd)
        if self._writing:
            self._loop.remove_writer(self._fd)
        if self._tapping:
            self._loop.remove_reader(self._taps_fd)

    def _step(self, call: Step) -> None:
        if not self._done:
            self.apply(call())
