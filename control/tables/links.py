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

Each row has a health (`tables/health.py`), kept by the table beside the row's
revisions: a health write does not bump the revision, so change trackers never
see it; `watch_health` watchers do, after each write. An upsert makes the row's
health pending (its handshake problem stays, its wire is the same), a delete
drops it. Beside the rows, the table keeps what derivation found about each
local pod's links that got no row (`Findings`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field
from enum import StrEnum

from meshwire.control.model.emulation import Impairments
from meshwire.control.tables.health import (
    NOTHING_FOUND,
    PENDING,
    Findings,
    Health,
    HealthWatcher,
)
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


POD_INDEX = "pod"


def pods_of(row: LinkRow) -> set[str]:
    """The local pods (`ns/pod`) a row touches."""
    return {f"{row.namespace}/{end.pod}" for end in row.ends()}


class LinksTable(Table[LinkRow]):
    """The links table, indexed by the local pods (`ns/pod`) each row touches, with the
    health of its rows and pods (see the module doc)."""

    def __init__(self) -> None:
        super().__init__("links", indexes={POD_INDEX: pods_of})
        # Invariant: exactly the keys of current rows.
        self._health: dict[str, Health] = {}
        # Invariant: only pods derivation found something about.
        self._findings: dict[str, Findings] = {}
        # Watchers of every write, and of the writes that touch one pod.
        self._watchers: list[HealthWatcher] = []
        self._pod_watchers: dict[str, list[HealthWatcher]] = {}

    # -- reads ----------------------------------------------------------------

    def health(self, key: str) -> Health:
        """The row's health; pending for no row."""
        return self._health.get(key, PENDING)

    def with_health(self) -> list[tuple[LinkRow, Health]]:
        """Every row with its health, a snapshot."""
        return [(row.obj, self.health(row.key)) for row in self.rows()]

    def findings(self, pod: str) -> Findings:
        """What derivation last found about the pod's links that got no row."""
        return self._findings.get(pod, NOTHING_FOUND)

    # -- writes ---------------------------------------------------------------

    def upsert(self, key: str, obj: LinkRow) -> int:
        """Insert or replace the row, its health pending; returns the new revision."""
        old = self.get(key)
        revision = super().upsert(key, obj)
        before = self.health(key)
        self._health[key] = after = before.pending()
        pods = pods_of(obj) if old is None else pods_of(obj) | pods_of(old)
        self._tell(pods, before.errors_may_differ(after))
        return revision

    def delete(self, key: str) -> LinkRow | None:
        """Remove the row and its health; deleting a missing key is a no-op."""
        old = super().delete(key)
        if old is not None:
            before = self._health.pop(key)
            self._tell(pods_of(old), before.errors_may_differ(PENDING))
        return old

    def set_health(self, key: str, health: Health) -> LinkRow | None:
        """Record the health of row `key` and tell its watchers; the row, or None
        (nothing recorded) when the table has no row `key`."""
        row = self.get(key)
        if row is None:
            return None
        before = self._health[key]
        self._health[key] = health
        self._tell(pods_of(row), before.errors_may_differ(health))
        return row

    def set_findings(self, found: Mapping[str, Findings]) -> None:
        """Record what derivation found for each pod of `found` (NOTHING_FOUND: nothing)
        and tell the watchers of those pods, changed or not: derivation ran for them."""
        for pod, findings in found.items():
            if findings == NOTHING_FOUND:
                self._findings.pop(pod, None)
            else:
                self._findings[pod] = findings
        if found:
            self._tell(found.keys(), True)

    # -- watchers ---------------------------------------------------------------

    def watch_health(self, watcher: HealthWatcher, pod: str | None = None) -> Callable[[], None]:
        """Call `watcher(pods, errors)` after every health write that touches `pod` (any
        pod when None): the pods it touched, and whether it may change their error
        messages. On the writer's (the event loop's) thread; returns what stops it
        (once or more)."""
        watchers = self._watchers if pod is None else self._pod_watchers.setdefault(pod, [])
        watchers.append(watcher)

        def stop() -> None:
            if watcher in watchers:
                watchers.remove(watcher)
            if pod is not None and not watchers:
                self._pod_watchers.pop(pod, None)

        return stop

    def _tell(self, pods: Set[str], errors: bool) -> None:
        for watcher in list(self._watchers):
            watcher(pods, errors)
        for pod in pods & self._pod_watchers.keys():
            for watcher in list(self._pod_watchers.get(pod, ())):
                watcher(pods, errors)


def new_links_table() -> LinksTable:
    return LinksTable()
