"""One gRPC wire end as control sees it, and everything that follows from it: pure.

A wire is the local end of a `grpc` row of the links table (key `ns/uid/pod`).
Its state is three facts:

- `row`: the desired link, as the grpc driver last realised it;
- the TAP: control's fd on it, which TAP that is (`TapRef`), and a generation
  that changes with every new fd (so a worker is handed the new one);
- `far`: the far end (`FarEnd`) once a handshake in either direction
  succeeded for this row's peer; None until then and whenever the peer moves,
  restarts its end or withdraws it.

Everything else is derived from them, never stored twice: the wire is ready
iff `far` is set; only a ready wire whose cable is not pulled (`row.down`)
has its TAP in a worker (`worker_command`, with the end's impairments) and
carrier up; a wire that is not ready wants a handshake. A pulled wire keeps
its far end, so plugging it back needs no handshake: carrier returns at once.
A `local` wire's far end is on this node too (a same-node link under
emulation): the manager joins the two ends itself, never by a handshake, and
their worker (both ends have the same worker, supervisor.py) carries the
frames TAP to TAP.
`judge_offer` is the callee's side of a handshake. This is why the races KNE
#743 fixed cannot happen here: only the local reconciler creates a TAP (an
offer only sets `far`), a wire in no worker holds no stream reference, and a
removed or re-pointed wire is whatever the next `worker_command` says.

A worker outlives control when it has a run directory (supervisor.py): it keeps
each wire's AddWire, whose `note` (`note`, `read_note`) names the row key and
the TAP, and hands both back to the next control process. `adopted_far` is the
far end such a wire is still joined to, so a restarted control keeps the wire
ready (and the carrier up) while a handshake verifies it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from meshwire.control.common.ids import far_end
from meshwire.control.tables.links import LinkRow
from meshwire.control.wire.types import FarEnd, TapRef
from meshwire.dataplane.messages import IMPAIRMENT_FIELDS, AddWire
from meshwire.proto import meshwire_pb2


@dataclass(slots=True)
class Wire:
    row: LinkRow
    tap: TapRef
    # Control's fd on the TAP; the manager closes it when it is replaced or the wire goes.
    fd: int
    generation: int
    far: FarEnd | None = None
    # A ready wire asked again, to learn whether the far end still has it (the
    # full pass); an answer that it does not makes the wire not ready.
    verify: bool = False
    # The TAP behind `fd` is new to the manager (made or attached anew): its
    # address is announced once the carrier is on, the first moment a frame can leave.
    announce: bool = False
    # The far end is on this node (the row's peer node is this one): joined by the
    # manager to the wire of `far_key(row)`, never by a handshake. Set with `row`.
    local: bool = False

    @property
    def ready(self) -> bool:
        return self.far is not None

    @property
    def far_wire_id(self) -> int:
        return far_wire_id(self.row)

    def wants_handshake(self) -> bool:
        return not self.local and (self.far is None or self.verify)


def far_wire_id(row: LinkRow) -> int:
    """The wire id the far node derives for its end of `row`'s link."""
    return far_end(row.wire_id)


def far_key(row: LinkRow) -> str:
    """The row key of the far end's wire, on the node the far end runs on."""
    return f"{row.namespace}/{row.uid}/{row.peer.pod}"


def pairs_with(wire: Wire, far: Wire) -> bool:
    """Whether the local wires `wire` and `far` are the two ends of one same-node link."""
    return (
        wire.local
        and far.local
        and far.row.peer.pod == wire.row.local.pod
        and far.row.wire_id == far_wire_id(wire.row)
    )


def same_far_end(old: LinkRow, new: LinkRow) -> bool:
    """Whether a handshake made for `old` still holds for `new` (same peer pod, node, ids)."""
    return (
        old.peer.pod == new.peer.pod
        and old.peer_node_ip == new.peer_node_ip
        and old.wire_id == new.wire_id
    )


def worker_command(wire: Wire) -> AddWire | None:
    """What the owning worker must hold for this wire: the AddWire of a ready wire, else nothing."""
    if wire.far is None or wire.row.down:
        return None
    impairments = wire.row.local.impairments
    return AddWire(
        wire.row.wire_id,
        wire.row.namespace,
        wire.far.node_ip,
        wire.far.data_port,
        wire.far.wire_id,
        tuple(getattr(impairments, name) for name in IMPAIRMENT_FIELDS) if impairments else (),
        local=wire.local,
        note=note(wire.row.key, wire.tap),
    )


def note(key: str, tap: TapRef) -> str:
    """What a worker keeps for control on a wire: the row key and the TAP."""
    return json.dumps([key, *tap.netns, tap.ifindex], separators=(",", ":"))


def read_note(text: str) -> tuple[str, TapRef] | None:
    """The (row key, TAP) of a `note`; None if it is not one."""
    try:
        key, dev, ino, ifindex = json.loads(text)
    except (ValueError, TypeError):
        return None
    if not isinstance(key, str) or not all(type(n) is int for n in (dev, ino, ifindex)):
        return None
    return key, TapRef((dev, ino), ifindex)


def adopted_far(row: LinkRow, command: AddWire, node_ip: str) -> FarEnd | None:
    """The far end an adopted wire (its worker holds `command`) is joined to, if it is
    still the far end `row` wants: same wire id, same peer node, cable plugged."""
    local = row.peer_node_ip == node_ip
    if command.wire_id != row.wire_id or command.local != local or row.down:
        return None
    if command.peer_node != row.peer_node_ip or command.peer_wire_id != far_wire_id(row):
        return None
    return FarEnd(command.peer_node, command.peer_port, command.peer_wire_id)


def carrier(wire: Wire) -> bool:
    """Whether the wire's TAP has carrier: joined to its far end, and the cable not pulled."""
    return wire.ready and not wire.row.down


def offer(wire: Wire, data_port: int) -> meshwire_pb2.WireOffer:
    """The CreateWires offer this node makes for `wire`."""
    row = wire.row
    return meshwire_pb2.WireOffer(
        local=meshwire_pb2.WireEnd(namespace=row.namespace, uid=row.uid, pod=row.local.pod),
        peer_pod=row.peer.pod,
        wire_id=row.wire_id,
        data_port=data_port,
    )


@dataclass(frozen=True, slots=True)
class Verdict:
    """The callee's judgement of one offer: empty `error` means accepted."""

    error: str = ""
    # The callee's end is not realised yet (or it has not seen the topology
    # change the caller saw): expected, and the callee calls back.
    pending: bool = False


def offer_key(offer_: meshwire_pb2.WireOffer) -> str:
    """The callee's row key the offer is about: its own pod's end of the link."""
    return f"{offer_.local.namespace}/{offer_.local.uid}/{offer_.peer_pod}"


def judge_offer(
    wire: Wire | None,
    caller_ip: str,
    offer_: meshwire_pb2.WireOffer,
    offloads: bool,
    caller_offloads: bool,
) -> Verdict:
    """Whether this node's `wire` (None: no wire for the offer's key) joins the offered far end."""
    link = f"{offer_.local.namespace}/{offer_.local.uid}"
    here = f"pod {offer_.peer_pod}"
    if wire is None:
        return Verdict(f"link {link}: {here} has no gRPC wire end on this node yet", pending=True)
    row = wire.row
    if wire.local:
        return Verdict(
            f"link {link}: {here} links to pod {row.peer.pod} on this node, not across nodes",
            pending=True,
        )
    if row.peer.pod != offer_.local.pod:
        return Verdict(
            f"link {link}: {here} links to pod {row.peer.pod} here, not {offer_.local.pod}",
            pending=True,
        )
    if row.peer_node_ip != caller_ip:
        return Verdict(
            f"link {link}: this node sees pod {row.peer.pod} on node {row.peer_node_ip}, "
            f"not {caller_ip}",
            pending=True,
        )
    if offer_.wire_id != far_wire_id(row):
        return Verdict(
            f"link {link}: offered wire id {offer_.wire_id}, this node derives "
            f"{far_wire_id(row)} for pod {row.peer.pod}'s end (the two nodes read different "
            f"id allocations, or run different meshwire versions)"
        )
    if caller_offloads != offloads:
        return Verdict(
            f"link {link}: dataplane.offloads is {_onoff(caller_offloads)} on node {caller_ip} "
            f"and {_onoff(offloads)} here; both ends of a wire must agree"
        )
    return Verdict()


def _onoff(flag: bool) -> str:
    return "on" if flag else "off"
