"""Rows of the `links` table: the link ends this node must realise.

A row is desired state only, derived by a pure function from the topologies
table (`reconcile/derive.py`); it holds everything a link driver needs and
nothing it has to look up. Realised state is read back from the kernel by the
drivers, never cached here.

Keys: a veth joins two pods of this node and is one row, `ns/uid`; every other
kind (a `detached` row: a pod end whose far pod is not running) is one end on
this node, `ns/uid/pod`. So when a pod moves between nodes
the key changes with the kind: the old row is deleted (its driver tears the old
link down) and the new one inserted.

Each row also carries its reconcile status (`LinkStatus`), which only the
reconciler writes (`LinksTable.set_status`). A status is not desired state: a
status write does not bump the table's revision, so change trackers never see
it; `watch_status` callbacks do, each write. A row's status goes with the row
when it is deleted; an upsert keeps it until the reconciler takes the change
(and sets it pending). A row without a status yet is pending.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from meshwire.control.model.emulation import Impairments
from meshwire.control.tables.table import Table


class LinkKind(StrEnum):
    VETH = "veth"
    VXLAN = "vxlan"
    GRPC = "grpc"
    MACVLAN = "macvlan"
    # The far end does not exist now: the pod end alone, without carrier.
    DETACHED = "detached"


@dataclass(frozen=True, slots=True)
class End:
    """One end of a link: an interface `intf` in the network namespace `netns`.

    `netns` is a path (`/var/run/netns/x`, `/proc/<pid>/ns/net`); it is empty
    for an end on another node. `ip` is a CIDR (`10.0.0.1/24`, `2001:db8::1/64`)
    or empty for an interface without an address. `mac` is the MAC the
    interface is made with (`model/macs.py`), lower case; "" for a host
    interface (a macvlan's lower device), which meshwire does not make.
    `impairments` are those of the frames this end sends (model/emulation.py).
    """

    pod: str
    netns: str
    intf: str
    ip: str = ""
    mac: str = ""
    impairments: Impairments = field(default_factory=Impairments)


@dataclass(frozen=True, slots=True)
class LinkRow:
    namespace: str
    uid: int
    kind: LinkKind
    local: End
    # veth: the other pod of this node. vxlan/grpc: the pod on the peer node.
    # macvlan: pod "localhost", intf the host interface to attach to. detached:
    # the far pod and interface, with no netns (it is not running).
    peer: End
    mtu: int
    # vxlan and grpc: the underlay address of the node the peer pod runs on.
    peer_node_ip: str = ""
    # vxlan: the VNI, the same on both nodes.
    vni: int = 0
    # grpc: this end's wire id, stable for (namespace, uid, local pod).
    wire_id: int = 0
    # vxlan and grpc: why the link has no id (its namespace got no slot); the
    # driver reports it as the link's error and builds nothing. "" normally.
    id_problem: str = ""
    # The cable is pulled (`state: down` on either end): both ends without carrier,
    # no frame passes. Only a grpc row (the workers' path) can be pulled.
    down: bool = False
    # A grpc row only because the link is under emulation (impairments or a `state` on
    # either end): without it, a veth or vxlan. Turning it on or off rebuilds the link.
    emulated: bool = False

    @property
    def key(self) -> str:
        if self.kind is LinkKind.VETH:
            return f"{self.namespace}/{self.uid}"
        return f"{self.namespace}/{self.uid}/{self.local.pod}"

    def ends(self) -> tuple[End, ...]:
        """The ends this node realises: both for a veth, the local one otherwise."""
        if self.kind is LinkKind.VETH:
            return (self.local, self.peer)
        return (self.local,)


class State(StrEnum):
    PENDING = "pending"
    DONE = "done"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class LinkStatus:
    """The reconcile status of a row: pending, done, or error with its message."""

    state: State = State.PENDING
    message: str = ""
    # Failed attempts since the last success.
    attempts: int = 0
    # True when retrying cannot help (a bad spec, a name taken by a foreign
    # interface): the row waits for a change or the next full pass.
    permanent: bool = False

    def done(self) -> LinkStatus:
        return LinkStatus(State.DONE)

    def failed(self, message: str, permanent: bool) -> LinkStatus:
        return LinkStatus(State.ERROR, message, self.attempts + 1, permanent)


PENDING = LinkStatus()

POD_INDEX = "pod"

# (row, its status before the write, after it)
StatusWatcher = Callable[[LinkRow, LinkStatus, LinkStatus], None]


def pods_of(row: LinkRow) -> Iterable[str]:
    """The local pods (`ns/pod`) a row touches."""
    return {f"{row.namespace}/{end.pod}" for end in row.ends()}


class LinksTable(Table[LinkRow]):
    """The links table, indexed by the local pods (`ns/pod`) each row touches; each
    row with its reconcile status (see the module doc)."""

    def __init__(self) -> None:
        super().__init__("links", indexes={POD_INDEX: pods_of})
        # Invariant: only keys of current rows.
        self._statuses: dict[str, LinkStatus] = {}
        self._status_watchers: list[StatusWatcher] = []

    def status(self, key: str) -> LinkStatus:
        """The row's status; pending for a row without one, or no row."""
        return self._statuses.get(key, PENDING)

    def with_status(self) -> list[tuple[LinkRow, LinkStatus]]:
        """Every row with its status, a snapshot."""
        return [(row.obj, self.status(row.key)) for row in self.rows()]

    def errors(self, keys: Iterable[str]) -> list[str]:
        """Error messages of the rows `keys` (say, a pod's rows), in key order."""
        statuses = (self.status(key) for key in sorted(keys))
        return [status.message for status in statuses if status.state is State.ERROR]

    def set_status(self, key: str, status: LinkStatus) -> LinkRow | None:
        """Record the status of row `key` and tell every status watcher; the row, or
        None (nothing recorded) when the table has no row `key`."""
        row = self.get(key)
        if row is None:
            return None
        before = self.status(key)
        self._statuses[key] = status
        for watcher in list(self._status_watchers):
            watcher(row, before, status)
        return row

    def watch_status(self, watcher: StatusWatcher) -> Callable[[], None]:
        """Call `watcher(row, before, after)` on every status write, with the row's
        status before and after it, on the writer's (the event loop's) thread;
        returns what stops it (once or more)."""
        self._status_watchers.append(watcher)

        def stop() -> None:
            if watcher in self._status_watchers:
                self._status_watchers.remove(watcher)

        return stop

    def delete(self, key: str) -> LinkRow | None:
        self._statuses.pop(key, None)
        return super().delete(key)


def new_links_table() -> LinksTable:
    return LinksTable()
