"""Python face of the C wire table and batch reader (`cext/wirec.c`, built by
scripts/build.d/30-dataplane.sh).

`WireTable` is a worker's wire id -> TAP table and its namespace tags;
`BatchReader` is one sender's reading state, which the C sender (`cext/h2sender.c`)
fills batch by batch. Python never touches a frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from meshwire.dataplane._wirec import ffi, lib
from meshwire.dataplane.codec import MAX_FRAME
from meshwire.dataplane.counters import Counters

# Batch buffers are not zeroed: every byte sent was read into them first, and
# untouched pages of a 1 MiB buffer then cost no memory.
_new_uncleared = ffi.new_allocator(should_clear_after_alloc=False)

# Wire ids the control plane derives (control/common/ids.py): 2^10 namespace
# slots x 2^14 uids x 2 ends. Only the 1024-id pages in use are allocated.
ID_LIMIT = 1 << 25


class WireTableError(ValueError):
    """A wire the table cannot hold (id out of range, bad fd, no memory)."""


class WireTable:
    """Wire id -> (TAP fd, namespace tag, peer wire id, counters); the fds stay the caller's."""

    def __init__(self, id_limit: int = ID_LIMIT) -> None:
        self._table: Any = ffi.gc(lib.mw_table_new(id_limit), lib.mw_table_free)
        if self._table == ffi.NULL:
            raise MemoryError("wire table: cannot allocate the id index")
        self.id_limit = id_limit
        self._counters: Any = ffi.new("mw_counters *")

    def set(self, wire_id: int, fd: int, tag: int, peer_id: int) -> None:
        """Adds or re-points a wire (keeping its counters); raises WireTableError."""
        result = lib.mw_table_set(self._table, wire_id, fd, tag, peer_id)
        if result == -1:
            raise WireTableError(f"wire {wire_id}: id must be below {self.id_limit}, fd {fd} >= 0")
        if result != 0:
            raise WireTableError(f"wire {wire_id}: out of memory for its table page")

    def set_source(self, wire_id: int, fd: int) -> None:
        """Reads the wire's frames to send from `fd` (-1: from its TAP again)."""
        if lib.mw_table_set_source(self._table, wire_id, fd) != 0:
            raise WireTableError(f"wire {wire_id}: no such wire")

    def clear(self, wire_id: int) -> bool:
        """Forgets the wire and its counters; False if there was none."""
        return bool(lib.mw_table_clear(self._table, wire_id) == 0)

    def counters(self, wire_id: int) -> Counters | None:
        if lib.mw_table_counters(self._table, wire_id, self._counters) != 0:
            return None
        c = self._counters
        return Counters(c.tx_frames, c.tx_bytes, c.tx_drops, c.rx_frames, c.rx_bytes, c.rx_drops)

    @property
    def unknown(self) -> int:
        """Frames received for a wire id this table lacks or holds for another namespace."""
        return int(lib.mw_table_unknown(self._table))

    def tag(self, namespace: str, peer: str = "") -> int:
        """The tag of the wires of a topology namespace whose far ends are on node `peer`
        (its address; "": streams bound to no node, without wire keys), made on first use
        (tags start at 1). A stream delivers only to the wires of its own tag. Raises
        WireTableError if the names are too long, MemoryError if out of memory."""
        ns, node = namespace.encode(), peer.encode()
        name = ffi.new("char[]", len(ns) + 1 + len(node))
        n = int(lib.mw_receiver_tag_name(ns, len(ns), node, len(node), name, len(name)))
        if n < 0:
            raise WireTableError(f"wire table: no tag for namespace {namespace!r} of {peer!r}")
        tag = int(lib.mw_table_tag(self._table, name, n, 1))
        if tag == 0:
            raise MemoryError(f"wire table: no memory for namespace {namespace!r}")
        return tag

    @property
    def handle(self) -> Any:
        return self._table


class BatchReader:
    """One sender's TAPs and the buffer their frames are packed into, allocated once.

    `capacity` (bytes of packed frames) must leave room for at least one
    `max_frame` read plus its header, or no frame is ever read. The buffer keeps
    `HEADROOM` bytes before the frames, where the sender writes each message's header.
    """

    HEADROOM = int(lib.MW_BATCHMSG_HEADROOM)

    def __init__(self, capacity: int, max_frames: int, max_frame: int = MAX_FRAME) -> None:
        self._buf: Any = _new_uncleared("uint8_t[]", self.HEADROOM + capacity)
        self._ids: Any = ffi.new("uint32_t[]", 0)
        self._reader: Any = ffi.new("mw_reader *")
        r = self._reader
        r.buf = self._buf + self.HEADROOM
        r.cap = capacity
        r.max_frame = min(max_frame, MAX_FRAME)
        r.max_frames = max_frames
        r.ids = self._ids
        r.n_ids = 0

    def set_wires(self, wire_ids: Sequence[int]) -> None:
        """The local wire ids to read from (their peer ids head the frames)."""
        self._ids = ffi.new("uint32_t[]", list(wire_ids))
        self._reader.ids = self._ids
        self._reader.n_ids = len(wire_ids)

    @property
    def handle(self) -> Any:
        """The `mw_reader *`; valid while this object lives."""
        return self._reader
