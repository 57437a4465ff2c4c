"""Messages between control and a dataplane worker: a pure codec, no I/O.

Each message is one SOCK_SEQPACKET datagram of compact JSON with a "type" key.
`AddWire` travels with exactly one TAP fd (SCM_RIGHTS, see fdpass.py); every
other message with none. Control sends AddWire/RemoveWire; the worker answers
each with a WireAck, in order, and sends Ready once and reports periodically.
A report of many wires is split into WireReport chunks, the last one marked.

A control process that connects to a running worker (adoption, see
dataplane/rundir.py) is sent Hello, then one AddWire per wire the worker holds
(with a duplicate of its TAP fd, and the `note` control gave it), then Ready.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from meshwire.dataplane.counters import Counters

# Wires per WireReport datagram: keeps each well below the socket's size limit.
WIRES_PER_REPORT = 500


class MessageError(ValueError):
    """A datagram that is not a valid message; the text names the bad field."""


@dataclass(frozen=True, slots=True)
class AddWire:
    """Add wire `wire_id`, or re-point it (new TAP fd and/or new peer), keeping counters.

    Frames read from its TAP go to `peer_wire_id` on the worker at
    `peer_node`:`peer_port`, on the stream of (namespace, peer_node, peer_port).
    With `local`, the far end `peer_wire_id` is a wire of this same worker (a
    same-node link): frames go from TAP to TAP inside the worker, with no stream,
    once both ends are added.
    """

    wire_id: int
    namespace: str
    peer_node: str
    peer_port: int
    peer_wire_id: int
    # The impairments of the frames read from the TAP, in `IMPAIRMENT_FIELDS` order
    # (model/emulation.py's fields); (): none, the frames go straight to the stream.
    impairments: tuple[float, ...] = ()
    local: bool = False
    # Control's own words on the wire, kept by the worker unread and handed back
    # to the control process that adopts it.
    note: str = ""


IMPAIRMENT_FIELDS = (
    "delay_ms",
    "jitter_ms",
    "loss_pct",
    "corrupt_pct",
    "duplicate_pct",
    "reorder_pct",
    "rate_mbps",
)


@dataclass(frozen=True, slots=True)
class RemoveWire:
    """Removing a wire the worker does not have is success."""

    wire_id: int


@dataclass(frozen=True, slots=True)
class Ready:
    data_port: int


@dataclass(frozen=True, slots=True)
class Hello:
    """The first message to a control process that connected to a running worker:
    which process it is (pid and start time) and the config it runs (`generation`)."""

    pid: int
    start_time: int
    generation: str


@dataclass(frozen=True, slots=True)
class WireAck:
    """The outcome of AddWire/RemoveWire `wire_id`: empty error on success."""

    wire_id: int
    error: str = ""


@dataclass(frozen=True, slots=True)
class StreamState:
    namespace: str
    peer_node: str
    peer_port: int
    refs: int
    batches: int


@dataclass(frozen=True, slots=True)
class StreamReport:
    """Outgoing streams with their refcounts; `incoming` streams being served;
    frames for unknown wires and malformed batches received; connections refused for
    failing the authenticated preface; same-node links joined TAP to TAP (`pairs`)."""

    streams: tuple[StreamState, ...]
    incoming: int
    unknown: int
    malformed: int
    refused: int = 0
    pairs: int = 0


@dataclass(frozen=True, slots=True)
class WireReport:
    wires: tuple[tuple[int, Counters], ...]
    last: bool


Message = AddWire | RemoveWire | Ready | Hello | WireAck | StreamReport | WireReport

_TYPES: dict[type[Any], str] = {
    AddWire: "add_wire",
    RemoveWire: "remove_wire",
    Ready: "ready",
    Hello: "hello",
    WireAck: "wire_ack",
    StreamReport: "stream_report",
    WireReport: "wire_report",
}


def encode(message: Message) -> bytes:
    body: dict[str, Any] = {"type": _TYPES[type(message)]}
    if isinstance(message, StreamReport):
        body |= {
            "streams": [
                [s.namespace, s.peer_node, s.peer_port, s.refs, s.batches] for s in message.streams
            ],
            "incoming": message.incoming,
            "unknown": message.unknown,
            "malformed": message.malformed,
            "refused": message.refused,
            "pairs": message.pairs,
        }
    elif isinstance(message, WireReport):
        body |= {
            "wires": [[wire_id, *c.as_list()] for wire_id, c in message.wires],
            "last": message.last,
        }
    else:
        body |= {name: getattr(message, name) for name in message.__dataclass_fields__}
    return json.dumps(body, separators=(",", ":")).encode()


def wire_reports(wires: list[tuple[int, Counters]]) -> list[WireReport]:
    """`wires` split into WireReport chunks; at least one, the last marked."""
    chunks = [wires[i : i + WIRES_PER_REPORT] for i in range(0, len(wires), WIRES_PER_REPORT)]
    chunks = chunks or [[]]
    return [WireReport(tuple(chunk), i == len(chunks) - 1) for i, chunk in enumerate(chunks)]


def decode(data: bytes) -> Message:
    """Raises MessageError naming the message type and field that is missing or wrong."""
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MessageError(f"worker message: not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise MessageError("worker message: not a JSON object")
    kind = body.get("type")
    r = _Reader(body, str(kind))
    match kind:
        case "add_wire":
            return AddWire(
                r.u32("wire_id"),
                r.text("namespace"),
                r.text("peer_node"),
                r.port("peer_port"),
                r.u32("peer_wire_id"),
                r.impairments("impairments"),
                r.flag("local", False),
                r.text("note", ""),
            )
        case "remove_wire":
            return RemoveWire(r.u32("wire_id"))
        case "ready":
            return Ready(r.port("data_port"))
        case "hello":
            return Hello(r.count("pid"), r.count("start_time"), r.text("generation"))
        case "wire_ack":
            return WireAck(r.u32("wire_id"), r.text("error"))
        case "stream_report":
            return StreamReport(
                tuple(_stream(kind, row) for row in r.items("streams")),
                r.count("incoming"),
                r.count("unknown"),
                r.count("malformed"),
                r.count("refused"),
                r.count("pairs", 0),
            )
        case "wire_report":
            return WireReport(tuple(_wire(kind, row) for row in r.items("wires")), r.flag("last"))
    raise MessageError(f"worker message: unknown type {kind!r}")


def _stream(kind: str, row: Any) -> StreamState:
    if not (isinstance(row, list) and len(row) == 5):
        raise MessageError(f"{kind}.streams: entry {row!r} is not [ns, node, port, refs, batches]")
    r = _Reader(
        dict(zip(("namespace", "peer_node", "peer_port", "refs", "batches"), row, strict=True)),
        kind,
    )
    return StreamState(
        r.text("namespace"),
        r.text("peer_node"),
        r.port("peer_port"),
        r.count("refs"),
        r.count("batches"),
    )


def _wire(kind: str, row: Any) -> tuple[int, Counters]:
    if not (isinstance(row, list) and len(row) in (7, 13)):
        raise MessageError(f"{kind}.wires: entry {row!r} is not [id, 6 or 12 counters]")
    r = _Reader({"wire_id": row[0]}, kind)
    try:
        return r.u32("wire_id"), Counters.from_list(row[1:])
    except ValueError as exc:
        raise MessageError(f"{kind}.wires: {exc}") from None


class _Reader:
    def __init__(self, body: dict[str, Any], kind: str) -> None:
        self._body = body
        self._kind = kind

    def _get(self, field: str, kind: type[Any], absent: Any = None) -> Any:
        """The field's value; `absent` (if not None) when the field is missing."""
        if absent is not None and field not in self._body:
            return absent
        value = self._body.get(field)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise MessageError(f"{self._kind}.{field}: expected {kind.__name__}, got {value!r}")
        return value

    def text(self, field: str, absent: str | None = None) -> str:
        value: str = self._get(field, str, absent)
        return value

    def flag(self, field: str, absent: bool | None = None) -> bool:
        value: bool = self._get(field, bool, absent)
        return value

    def items(self, field: str) -> list[Any]:
        value: list[Any] = self._get(field, list)
        return value

    def impairments(self, field: str) -> tuple[float, ...]:
        """Absent or []: none; else one non-negative number per IMPAIRMENT_FIELDS."""
        value = self._body.get(field, [])
        numbers = isinstance(value, list) and all(
            isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in value
        )
        if not numbers or len(value) not in (0, len(IMPAIRMENT_FIELDS)):
            raise MessageError(
                f"{self._kind}.{field}: expected [] or {len(IMPAIRMENT_FIELDS)} "
                f"non-negative numbers, got {value!r}"
            )
        return tuple(float(v) for v in value)

    def _int(self, field: str, low: int, high: int, absent: int | None = None) -> int:
        value: int = self._get(field, int, absent)
        if not low <= value <= high:
            raise MessageError(f"{self._kind}.{field}: {value} outside {low}..{high}")
        return value

    def u32(self, field: str) -> int:
        return self._int(field, 0, 0xFFFFFFFF)

    def port(self, field: str) -> int:
        return self._int(field, 1, 65535)

    def count(self, field: str, absent: int | None = None) -> int:
        return self._int(field, 0, 2**64 - 1, absent)
