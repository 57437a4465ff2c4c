"""The contract between the reconciler and the kernel: `LinkDriver`, and `Drivers`.

Every method is synchronous and blocking (netlink through pyroute2, which must
not run on the uvloop event loop); the reconciler calls them from worker
threads, at most one call per row key at a time. Nothing is cached between
calls: each call reads the kernel and acts on what it finds.

Errors: `LinkError` (transient: retry with backoff) or `SpecError` (cannot
succeed as specified: record it, do not loop), both naming the link (`ns/uid`),
the netns and the interface. Nothing else escapes a driver.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..tables.links import LinkKind, LinkRow
from . import iface
from .announce import Announcer
from .aside import Reaper
from .detached import DetachedDriver
from .driver_errors import SpecError, blame
from .iface_names import Mark
from .macvlan import MacvlanDriver
from .netns import NetnsGone, NotANetns, netlink, open_netns
from .veth import VethDriver
from .vxlan import VXLAN_PORT, VxlanDriver


@dataclass(frozen=True, slots=True)
class OwnedInterface:
    """An interface carrying a meshwire mark, or half-made (`mark` None: a build cut
    short, see iface_names.BUILD_GROUP), as `owned()` finds it."""

    name: str
    ifindex: int
    mark: Mark | None
    # IFLA_INFO_KIND: "veth", "vxlan", "macvlan", "tun", ...
    kind: str


class KindDriver(Protocol):
    """Realises the rows of one link kind."""

    def update(self, row: LinkRow) -> None:
        """Make the kernel equal to `row`; when nothing differs, change nothing.

        Creates what is missing, repairs a broken or half-gone link, and fixes
        address, MTU, up state and placement. An interface already holding one of
        the row's names without being this link's is never touched.
        """
        ...

    def delete(self, row: LinkRow, keep: Collection[tuple[str, str]] = ()) -> None:
        """Remove what `row` created, but the pod ends in `keep` ((netns, intf): the row
        that replaces it holds them) and any pod end another transport holds now
        (podend.release). Deleting what does not exist (or whose netns vanished)
        is success; interfaces not marked for this link are left alone."""
        ...


@runtime_checkable
class KeepsAcrossMoves(Protocol):
    """A kind that clears a link's old ends its own way when they move and the kind
    stays: grpc keeps the link's state (the wire's id and stream depend on the
    link, not on where its pod end is); veth frees the old ends' names at once and
    deletes them a moment later, so the new ends wait for no deletion."""

    def vacate(self, row: LinkRow, keep: Collection[tuple[str, str]] = ()) -> None:
        """Remove `row`'s pod ends but those in `keep` (their names free on return) and
        keep what the row that replaces it needs; gone interfaces or netns are success."""
        ...


class LinkDriver(KindDriver, Protocol):
    """What the reconciler and the pruner use: every kind, plus marked-interface listing."""

    def move(self, previous: LinkRow, row: LinkRow) -> None:
        """Clear what `previous` realised before `row` (same key, ends elsewhere or
        another kind) is, keeping the pod ends `row` has too: `vacate` when the kind
        stays and keeps its state across moves, `delete` otherwise."""
        ...

    def owned(self, netns: str) -> list[OwnedInterface]:
        """The marked and half-made interfaces in `netns`; empty if the netns is gone."""
        ...

    def remove(self, netns: str, ifname: str) -> None:
        """Delete `ifname` in `netns` only if it carries a meshwire mark or is half-made.

        A missing netns or interface, or any other unmarked interface, is left as
        it is and is not an error.
        """
        ...


class Drivers:
    """`LinkDriver` over one `KindDriver` per kind, picked by `row.kind`.

    A row of a kind with no driver (e.g. grpc before its driver is plugged in)
    is a `SpecError` naming the kind, and so is a row whose link has no id
    (`row.id_problem`): it cannot be built until the row changes.
    """

    def __init__(self, by_kind: Mapping[LinkKind, KindDriver]) -> None:
        self._by_kind = dict(by_kind)

    def update(self, row: LinkRow) -> None:
        driver = self._driver(row)
        if row.id_problem:
            raise SpecError(
                f"{row.namespace}/{row.uid}", row.local.netns, row.local.intf, row.id_problem
            )
        driver.update(row)

    def delete(self, row: LinkRow, keep: Collection[tuple[str, str]] = ()) -> None:
        self._driver(row).delete(row, keep)

    def move(self, previous: LinkRow, row: LinkRow) -> None:
        driver = self._driver(previous)
        keep = {(end.netns, end.intf) for end in row.ends()}
        if previous.kind is row.kind and isinstance(driver, KeepsAcrossMoves):
            driver.vacate(previous, keep)
        else:
            driver.delete(previous, keep)

    def owned(self, netns: str) -> list[OwnedInterface]:
        with blame("", netns, ""):
            try:
                with open_netns(netns) as ns, netlink(ns) as ipr:
                    found = iface.dump(ipr)
            except NetnsGone:
                return []
        return [
            OwnedInterface(i.name, i.index, i.mark, i.kind)
            for i in found
            if i.mark is not None or i.half_made
        ]

    def remove(self, netns: str, ifname: str) -> None:
        with blame("", netns, ifname):
            try:
                with open_netns(netns) as ns, netlink(ns) as ipr:
                    found = iface.find(ipr, ifname)
                    if found is not None and (found.mark is not None or found.half_made):
                        iface.delete(ipr, found.index)
            except (NetnsGone, NotANetns):
                return

    def _driver(self, row: LinkRow) -> KindDriver:
        driver = self._by_kind.get(row.kind)
        if driver is None:
            raise SpecError(
                f"{row.namespace}/{row.uid}",
                row.local.netns,
                row.local.intf,
                f"no driver for link kind {row.kind.value!r} on this node",
            )
        return driver


def kernel_drivers(
    host_netns: str = "",
    vxlan_port: int = VXLAN_PORT,
    reaper: Reaper | None = None,
    announcer: Announcer | None = None,
) -> dict[LinkKind, KindDriver]:
    """The netlink drivers for veth, vxlan, macvlan and detached ends.

    `host_netns`: the node's netns, where the pod ends' node sides, the vxlan
    devices and their UDP sockets live and macvlan host interfaces are; "" means
    the calling thread's own (the daemon runs in its node's netns).
    `reaper`: what deletes the node sides set aside (default: one of their own).
    `announcer`: where new ends' announcements are queued (default: one of their own).
    """
    announcer = announcer if announcer is not None else Announcer()
    reaper = reaper if reaper is not None else Reaper()
    return {
        LinkKind.VETH: VethDriver(host_netns, reaper),
        LinkKind.VXLAN: VxlanDriver(host_netns, vxlan_port, announcer, reaper),
        LinkKind.MACVLAN: MacvlanDriver(host_netns, announcer),
        LinkKind.DETACHED: DetachedDriver(host_netns, reaper),
    }
