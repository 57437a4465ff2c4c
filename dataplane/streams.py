"""Outgoing streams, refcounted by the wires that use them (docs/design.md §5).

A worker sends the frames of all its wires towards one (topology namespace,
peer node, peer worker port) on one stream. A stream is opened by the first
wire that needs it and closed when its last wire leaves; a wire whose peer
moves leaves the old stream and joins the new one. Pure bookkeeping: opening
and closing are the caller's, through the `Stream` protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, Protocol, TypeVar

from meshwire.base import hostport


class StreamKey(NamedTuple):
    namespace: str
    peer_node: str
    peer_port: int

    def __str__(self) -> str:
        return f"{self.namespace} to {hostport.join(self.peer_node, self.peer_port)}"


class Stream(Protocol):
    def set_wires(self, wire_ids: frozenset[int]) -> None:
        """The wires whose frames this stream now carries (never empty)."""


S = TypeVar("S", bound=Stream)


@dataclass
class Streams(Generic[S]):
    """StreamKey -> stream and the set of wire ids referencing it.

    Invariant: every key in `_wires` has a non-empty set and an entry in
    `_streams`, and each wire id is in at most one set.
    """

    open_stream: Callable[[StreamKey], S]
    _streams: dict[StreamKey, S] = field(default_factory=dict)
    _wires: dict[StreamKey, set[int]] = field(default_factory=dict)
    _key_of: dict[int, StreamKey] = field(default_factory=dict)

    def attach(self, wire_id: int, key: StreamKey) -> S | None:
        """Makes `wire_id` use the stream `key`, opening it if needed.

        Returns the stream the wire left if that stream has no wire left (the
        caller closes it), else None. Attaching a wire to the stream it already
        uses changes nothing but tells the stream its wires again.
        """
        emptied = None
        old = self._key_of.get(wire_id)
        if old is not None and old != key:
            emptied = self.detach(wire_id)
        if key not in self._streams:
            self._streams[key] = self.open_stream(key)
            self._wires[key] = set()
        self._wires[key].add(wire_id)
        self._key_of[wire_id] = key
        self._streams[key].set_wires(frozenset(self._wires[key]))
        return emptied

    def detach(self, wire_id: int) -> S | None:
        """Drops the wire's reference; returns its stream if that was the last one.

        Detaching a wire that uses no stream returns None.
        """
        key = self._key_of.pop(wire_id, None)
        if key is None:
            return None
        wires = self._wires[key]
        wires.discard(wire_id)
        if wires:
            self._streams[key].set_wires(frozenset(wires))
            return None
        del self._wires[key]
        return self._streams.pop(key)

    def refs(self) -> dict[StreamKey, int]:
        return {key: len(wires) for key, wires in self._wires.items()}

    def items(self) -> list[tuple[StreamKey, S]]:
        return list(self._streams.items())
