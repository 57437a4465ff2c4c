"""The wire manager: control's state of every gRPC wire end on this node (docs/design.md §5).

It owns control's TAP fds and the facts of state.py, and keeps three things
equal to them:

- the workers (through `WorkerSlots.changed`: the pool asks `desired(wire_id)`
  and hands the worker the AddWire and a duplicate fd, or removes the wire);
- each TAP's carrier, and its pod end's (`pod_carrier`: what the pod sees):
  up exactly while the wire is ready and its cable not pulled
  (`state.carrier`), set again on every attach; when it comes up on
  a TAP new to the manager, the TAP's address is announced (links/announce.py),
  on a thread of its own, so peers' neighbour caches follow a changed MAC;
- the handshakes: every peer node with a wire that is not ready (or is being
  verified) is in `nodes`, the queue the handshake loop serves, and so is a
  node owed a goodbye (DeleteWires) for an end removed here;
- each row's handshake problem, in the row's health in the links table
  (`Health.handshake`, tables/health.py): the last one worth reporting (a
  mismatch, an unreachable peer node), cleared when the wire is joined or goes.
  A far end that is simply not realised yet is not a problem: it calls back
  when it is.

Three parties change it: the grpc link driver (`attach`/`detach`, from netlink
threads through `ThreadEnds`), the handshake loop (`answered`/`unreachable`),
and the peer service (`offered`/`withdrawn`, a peer's own handshake). All of
them run on the event loop thread, so nothing here locks.

A wire whose far end is on this node too (`Wire.local`: a same-node link
under emulation) needs no handshake and no goodbye: the manager joins it to
the wire of the far end's key as soon as both are attached, and unjoins both
when either goes; their worker carries the frames TAP to TAP.

Wires a previous control process left in running workers are handed over by
the worker pool before any attach (`adopt`): each is kept, with the worker's
fd on its TAP, until the driver attaches its row. If the TAP is the same,
the wire takes that fd and stays joined to the far end its worker still
carries (`adopted_far`): no new fd, no carrier change, no frame lost; a remote
one is verified by a handshake. Adopted wires no row claimed by the end of the
initial reconciliation are dropped (`release_unclaimed`).

A goodbye is checked again when it is sent: if the wire is back by then (a
pod restarted on its node and its end was realised again) it is not sent, so
a late goodbye never cancels a fresh handshake.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from meshwire.control.common.queue import WorkQueue
from meshwire.control.links.announce import announce_at
from meshwire.control.links.driver_errors import LinkError, SpecError
from meshwire.control.tables.links import End, LinkRow, LinksTable
from meshwire.control.wire.state import (
    Wire,
    adopted_far,
    carrier,
    far_key,
    judge_offer,
    offer,
    offer_key,
    pairs_with,
    read_note,
    same_far_end,
    worker_command,
)
from meshwire.control.wire.types import FarEnd, TapRef
from meshwire.dataplane.messages import AddWire
from meshwire.dataplane.tap import set_carrier
from meshwire.proto import meshwire_pb2

log = logging.getLogger(__name__)

# A goodbye to a node that does not answer is given up after this many
# attempts (about 25 s with the handshake backoff): the far node's own
# topology tells it the link is gone, the goodbye only makes it quicker.
GOODBYE_ATTEMPTS = 8


class WorkerSlots(Protocol):
    def port_of(self, wire_id: int) -> int:
        """The data port of the worker that owns `wire_id`."""
        ...

    def changed(self, wire_id: int) -> None:
        """`desired(wire_id)` may have changed: bring the owning worker in line."""
        ...


@dataclass(frozen=True, slots=True)
class Desired:
    """What a worker must hold for one wire: the command, control's fd, its generation."""

    command: AddWire
    fd: int
    generation: int


@dataclass(frozen=True, slots=True)
class _Adopted:
    """A wire a running worker holds, not yet claimed by a row: what the worker holds,
    the TAP, an fd on it, and the generation the pool recorded it under."""

    command: AddWire
    tap: TapRef
    fd: int
    generation: int


@dataclass(frozen=True, slots=True)
class Goodbye:
    """A far end (on node `node_ip`) to tell that this node's end of its wire is gone."""

    node_ip: str
    namespace: str
    uid: int
    # The far end's pod: the callee's pod, as DeleteWires names it.
    pod: str


def announce_soon(end: End) -> None:
    """Announce `end`'s address from a thread of its own: it enters a pod netns."""
    threading.Thread(target=announce_at, args=(end,), name="meshwire-announce").start()


class WireManager:
    def __init__(
        self,
        node_ip: str,
        offloads: bool,
        slots: WorkerSlots,
        nodes: WorkQueue,
        links: LinksTable,
        announce: Callable[[End], None] = announce_soon,
        pod_carrier: Callable[[LinkRow, bool], None] | None = None,
    ) -> None:
        """`links`: where each row's handshake problem is written; `pod_carrier(row,
        on)`: gives the row's pod end carrier or takes it (by default nothing does:
        the TAP's own carrier is all there is)."""
        self.node_ip = node_ip
        self.links = links
        self.announce = announce
        self.pod_carrier = pod_carrier
        self.offloads = offloads
        self.slots = slots
        # Peer node IPs with handshake work: the handshake loop consumes it.
        self.nodes = nodes
        # Row key -> wire. Invariant: `_by_id[w.row.wire_id] == key` and `key in
        # _by_node[w.row.peer_node_ip]` for every wire `w` at `key`, and nothing else
        # is in either index.
        self._wires: dict[str, Wire] = {}
        self._by_id: dict[int, str] = {}
        self._by_node: dict[str, set[str]] = {}
        # Goodbyes not yet delivered -> attempts so far.
        self._goodbyes: dict[Goodbye, int] = {}
        # Row key -> a wire adopted from a running worker that no attach claimed yet.
        self._adopted: dict[str, _Adopted] = {}
        self._generation = itertools.count(1)
        self._closed = False

    # -- the driver's side (see ThreadEnds) ------------------------------------

    def held(self, key: str) -> TapRef | None:
        wire = self._wires.get(key)
        if wire is not None:
            return wire.tap
        adopted = self._adopted.get(key)
        return adopted.tap if adopted is not None else None

    def attach(self, row: LinkRow, tap: TapRef, fd: int | None) -> None:
        try:
            self._check_attach(row, tap, fd)
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        wire = self._wires.get(row.key)
        if wire is None:
            wire = self._claim(row, tap, fd)
            self._index(row.key, wire)
            self._carrier(wire)
            self.slots.changed(row.wire_id)
            if wire.local:
                self._pair(wire)
            else:
                self.nodes.add(row.peer_node_ip)
            return
        if fd is not None:
            old, wire.fd, wire.tap = wire.fd, fd, tap
            wire.generation = next(self._generation)
            wire.announce = True
            os.close(old)
        if not same_far_end(wire.row, row):
            self._unindex(row.key, wire)
            self._lose_far(wire)
            wire.row = row
            wire.local = row.peer_node_ip == self.node_ip
            self._index(row.key, wire)
        else:
            wire.row = row
        # After the row: an announcement names the new TAP's netns. Every attach:
        # the pod end may be new (its pod restarted) behind the same TAP.
        self._carrier(wire)
        self.slots.changed(row.wire_id)
        if wire.local:
            self._pair(wire)
        elif wire.wants_handshake():
            self.nodes.add(row.peer_node_ip)

    def _check_attach(self, row: LinkRow, tap: TapRef, fd: int | None) -> None:
        link = f"{row.namespace}/{row.uid}"
        if self._closed:
            raise LinkError(link, row.local.netns, row.local.intf, "the wire manager is closed")
        wire = self._wires.get(row.key)
        if fd is None and (wire is None or wire.tap != tap) and self.held(row.key) != tap:
            raise LinkError(
                link, row.local.netns, row.local.intf, "no fd is held on this TAP any more"
            )
        other = self._by_id.get(row.wire_id)
        if other is not None and other != row.key:
            raise SpecError(
                link,
                row.local.netns,
                row.local.intf,
                f"wire id {row.wire_id} is already used by {other} on this node "
                "(their namespaces hash to one slot); rename a namespace or renumber a uid",
            )

    def _claim(self, row: LinkRow, tap: TapRef, fd: int | None) -> Wire:
        """A new wire for `row`: on the adopted wire's fd if `fd` is None (its TAP is
        `tap`, `_check_attach`), else on `fd`, the adopted one dropped."""
        adopted = self._adopted.pop(row.key, None)
        local = row.peer_node_ip == self.node_ip
        if fd is not None:
            if adopted is not None:
                self._drop(adopted)
            wire = Wire(row, tap, fd, next(self._generation), announce=True)
            wire.local = local
            return wire
        assert adopted is not None  # _check_attach
        wire = Wire(row, tap, adopted.fd, adopted.generation)
        wire.local = local
        wire.far = adopted_far(row, adopted.command, self.node_ip)
        wire.verify = wire.far is not None and not local
        if adopted.command.wire_id != row.wire_id:
            self.slots.changed(adopted.command.wire_id)
        return wire

    def adopt(self, command: AddWire, fd: int) -> int | None:
        """Keep a wire a running worker holds (`fd` on its TAP, owned from now on) for
        its row's attach; the generation to record it under, or None if it is not a
        wire of this manager's (the fd is closed)."""
        found = read_note(command.note)
        if found is None or self._closed:
            os.close(fd)
            return None
        key, tap = found
        old = self._adopted.pop(key, None)
        if old is not None:
            os.close(old.fd)
        adopted = _Adopted(command, tap, fd, next(self._generation))
        self._adopted[key] = adopted
        return adopted.generation

    def release_unclaimed(self) -> None:
        """Drop the adopted wires no row attached: their workers let them go."""
        adopted, self._adopted = self._adopted, {}
        for one in adopted.values():
            self._drop(one)
        if adopted:
            log.info("dropped %d wires of the last daemon that no link wants", len(adopted))

    def _drop(self, adopted: _Adopted) -> None:
        with contextlib.suppress(OSError):
            os.close(adopted.fd)
        self.slots.changed(adopted.command.wire_id)

    def detach(self, key: str) -> None:
        wire = self._wires.get(key)
        if wire is None:
            return
        self._unindex(key, wire)
        self._lose_far(wire)
        with contextlib.suppress(OSError):
            os.close(wire.fd)
        self._set_problem(wire, "")  # gone with its wire

    # -- what the worker pool reads ---------------------------------------------

    def desired(self, wire_id: int) -> Desired | None:
        key = self._by_id.get(wire_id)
        wire = self._wires.get(key) if key is not None else None
        if wire is None:
            return None
        command = worker_command(wire)
        return None if command is None else Desired(command, wire.fd, wire.generation)

    # -- the handshake loop's side ----------------------------------------------

    def offers_for(self, node_ip: str) -> list[tuple[str, meshwire_pb2.WireOffer]]:
        """(key, offer) of every wire towards `node_ip` that wants a handshake."""
        out = []
        for key in sorted(self._by_node.get(node_ip, ())):
            wire = self._wires[key]
            if wire.wants_handshake():
                out.append((key, offer(wire, self.slots.port_of(wire.row.wire_id))))
        return out

    def answered(self, node_ip: str, key: str, answer: meshwire_pb2.WireAnswer) -> None:
        wire = self._wires.get(key)
        if wire is None or wire.row.peer_node_ip != node_ip:
            return  # the wire went or moved while the call was out: its own pass follows
        wire.verify = False
        if answer.error:
            self._set_problem(wire, "" if answer.pending else answer.error)
            if wire.far is not None:
                log.info("wire %s: node %s no longer has its end: %s", key, node_ip, answer.error)
                self._lose_far(wire, goodbye=False)
            return
        self._set_problem(wire, "")
        self._join(wire, FarEnd(node_ip, answer.data_port, answer.wire_id))

    def unreachable(self, node_ip: str, keys: Iterable[str], why: str) -> None:
        """A CreateWires to `node_ip` failed as a whole; a ready wire stays ready."""
        for key in keys:
            wire = self._wires.get(key)
            if wire is not None and wire.row.peer_node_ip == node_ip:
                self._set_problem(wire, f"peer node {node_ip}: {why}")
                wire.verify = False

    def needs_handshake(self, node_ip: str) -> bool:
        if any(g.node_ip == node_ip for g in self._goodbyes):
            return True
        return any(self._wires[key].wants_handshake() for key in self._by_node.get(node_ip, ()))

    def goodbyes_for(self, node_ip: str) -> list[Goodbye]:
        """Goodbyes owed to `node_ip`, without those whose wire is back meanwhile."""
        out = []
        for goodbye in list(self._goodbyes):
            if goodbye.node_ip != node_ip:
                continue
            if self._back(goodbye):
                del self._goodbyes[goodbye]
            else:
                out.append(goodbye)
        return out

    def goodbyes_sent(self, goodbyes: Iterable[Goodbye], failure: str = "") -> None:
        for goodbye in goodbyes:
            if goodbye not in self._goodbyes:
                continue
            if not failure:
                del self._goodbyes[goodbye]
                continue
            self._goodbyes[goodbye] += 1
            if self._goodbyes[goodbye] >= GOODBYE_ATTEMPTS:
                del self._goodbyes[goodbye]
                log.warning(
                    "wire %s/%s: node %s was not told that this end is gone (%s); "
                    "its own topology will tell it",
                    goodbye.namespace,
                    goodbye.uid,
                    goodbye.node_ip,
                    failure,
                )

    def verify_all(self) -> None:
        """Ask every far end again whether it still has its end (the full pass)."""
        for wire in self._wires.values():
            if wire.ready and not wire.local:
                wire.verify = True
        for node_ip in self._by_node:
            self.nodes.add(node_ip)

    # -- the peer service's side ------------------------------------------------

    def offered(
        self, caller_ip: str, caller_offloads: bool, offers: Iterable[meshwire_pb2.WireOffer]
    ) -> list[meshwire_pb2.WireAnswer]:
        """Answers a peer's CreateWires: joins each acceptable offer to its wire here."""
        answers = []
        for one in offers:
            key = offer_key(one)
            wire = self._wires.get(key)
            verdict = judge_offer(wire, caller_ip, one, self.offloads, caller_offloads)
            end = meshwire_pb2.WireEnd(
                namespace=one.local.namespace, uid=one.local.uid, pod=one.peer_pod
            )
            if verdict.error or wire is None:
                answers.append(
                    meshwire_pb2.WireAnswer(end=end, error=verdict.error, pending=verdict.pending)
                )
                continue
            self._set_problem(wire, "")
            wire.verify = False
            self._join(wire, FarEnd(caller_ip, one.data_port, one.wire_id))
            answers.append(
                meshwire_pb2.WireAnswer(
                    end=end,
                    wire_id=wire.row.wire_id,
                    data_port=self.slots.port_of(wire.row.wire_id),
                )
            )
        return answers

    def withdrawn(self, caller_ip: str, ends: Iterable[meshwire_pb2.WireEnd]) -> None:
        """A peer's DeleteWires: its ends of these wires are gone; ours wait for a new one."""
        for end in ends:
            wire = self._wires.get(f"{end.namespace}/{end.uid}/{end.pod}")
            if wire is None or wire.far is None or wire.far.node_ip != caller_ip:
                continue
            log.info("wire %s: node %s removed its end", wire.row.key, caller_ip)
            self._lose_far(wire, goodbye=False)
            self.nodes.add_rate_limited(caller_ip)

    def _set_problem(self, wire: Wire, problem: str) -> None:
        """Write `problem` ("" for none) as the handshake problem of the wire's row."""
        health = self.links.health(wire.row.key)
        if health.handshake != problem:
            self.links.set_health(wire.row.key, health.with_handshake(problem))

    # -- observation ------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Wires by state: `ready` and `waiting` (for the far end)."""
        ready = sum(w.ready for w in self._wires.values())
        return {"ready": ready, "waiting": len(self._wires) - ready}

    def expected_refs(self, index_of: Callable[[int], int]) -> Counter[tuple[int, str, str, int]]:
        """(worker, namespace, peer node, peer port) -> ready wires, as the workers should count."""
        refs: Counter[tuple[int, str, str, int]] = Counter()
        for wire in self._wires.values():
            if wire.far is not None and not wire.local:  # a same-node link has no stream
                worker = index_of(wire.row.wire_id)
                refs[(worker, wire.row.namespace, wire.far.node_ip, wire.far.data_port)] += 1
        return refs

    def row_of(self, wire_id: int) -> LinkRow | None:
        """The row of the wire `wire_id` on this node, if any."""
        key = self._by_id.get(wire_id)
        wire = self._wires.get(key) if key is not None else None
        return wire.row if wire is not None else None

    def ready(self, key: str) -> bool:
        wire = self._wires.get(key)
        return wire is not None and wire.ready

    def __len__(self) -> int:
        return len(self._wires)

    # -- shutdown ---------------------------------------------------------------

    def close(self) -> None:
        """Refuse new attaches and close control's fds; the TAPs stay (they are persistent)."""
        self._closed = True
        for wire in self._wires.values():
            with contextlib.suppress(OSError):
                os.close(wire.fd)
        for adopted in self._adopted.values():
            with contextlib.suppress(OSError):
                os.close(adopted.fd)
        self._adopted.clear()
        self._wires.clear()
        self._by_id.clear()
        self._by_node.clear()

    # -- internals --------------------------------------------------------------

    def _join(self, wire: Wire, far: FarEnd) -> None:
        if wire.far == far:
            return
        wire.far = far
        self._carrier(wire)
        self.slots.changed(wire.row.wire_id)

    def _pair(self, wire: Wire) -> None:
        """Joins the local `wire` and its far end's wire, if that is attached (else the
        far end's own attach does)."""
        far = self._wires.get(far_key(wire.row))
        if far is None or not pairs_with(wire, far) or not pairs_with(far, wire):
            return
        port = self.slots.port_of(wire.row.wire_id)
        self._join(wire, FarEnd(self.node_ip, port, far.row.wire_id))
        self._join(far, FarEnd(self.node_ip, port, wire.row.wire_id))

    def _lose_far(self, wire: Wire, goodbye: bool = True) -> None:
        """The wire is no longer joined (its worker lets it go); with `goodbye`, the far
        node is told. A local wire's far end is unjoined with it."""
        row = wire.row
        if wire.local:
            far = self._wires.get(far_key(row))
            if far is not None and far.far is not None and far.far.wire_id == row.wire_id:
                far.far = None
                self._carrier(far)
                self.slots.changed(far.row.wire_id)
        elif goodbye and row.peer_node_ip:
            self._goodbyes.setdefault(
                Goodbye(row.peer_node_ip, row.namespace, row.uid, row.peer.pod), 0
            )
            self.nodes.add(row.peer_node_ip)
        if wire.far is not None:
            wire.far = None
            self._carrier(wire)
        self.slots.changed(row.wire_id)

    def _back(self, goodbye: Goodbye) -> bool:
        for key in self._by_node.get(goodbye.node_ip, ()):
            row = self._wires[key].row
            if (row.namespace, row.uid, row.peer.pod) == (
                goodbye.namespace,
                goodbye.uid,
                goodbye.pod,
            ):
                return True
        return False

    def _carrier(self, wire: Wire) -> None:
        on = carrier(wire)
        try:
            set_carrier(wire.fd, on)
        except OSError as exc:
            # The TAP is gone (its netns was deleted): the reconciler rebuilds it.
            log.debug("wire %s: carrier: %s", wire.row.key, exc)
            return
        if self.pod_carrier is not None:
            try:
                self.pod_carrier(wire.row, on)
            except Exception as exc:
                # The pod end is gone or being rebuilt: its next attach sets it again.
                log.debug("wire %s: pod end carrier: %s", wire.row.key, exc)
        if on and wire.announce:
            wire.announce = False
            self.announce(wire.row.local)

    def _index(self, key: str, wire: Wire) -> None:
        self._wires[key] = wire
        self._by_id[wire.row.wire_id] = key
        self._by_node.setdefault(wire.row.peer_node_ip, set()).add(key)

    def _unindex(self, key: str, wire: Wire) -> None:
        self._wires.pop(key, None)
        if self._by_id.get(wire.row.wire_id) == key:
            del self._by_id[wire.row.wire_id]
        keys = self._by_node.get(wire.row.peer_node_ip)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_node[wire.row.peer_node_ip]
