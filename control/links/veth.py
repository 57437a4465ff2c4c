"""veth: both pods on this node, one pair across their two netns.

`local.intf` lives in `local.netns` and `peer.intf` in `peer.netns`, each with
its End's address, the row's MTU, up and marked. The row is the same whichever
pod restarted, so `update` repairs from either side: a pair counts as intact only
if each end is a marked veth whose peer is the other end, in the other netns;
otherwise both names are cleared (only if marked for this link) and the pair is
built again. An end whose netns was destroyed takes its peer with it, but only
once the kernel has torn that netns down: a pod restarted a moment ago usually
left its peer holding the old end.

Each pair is created under its final names (lifecycle.create_marked). A new
pair announces nothing (announce.py): its two ends are new together, so
neither side has a neighbour entry on its interface that could name an old MAC.
Clearing a name never waits for the kernel's deletion (20-27 ms a veth): the
end holding it is set aside (aside.py: down, renamed, addresses removed) and
deleted a moment later by the driver's `Reaper`, so a restarted pod's new pair
is built at once. `vacate` (the reconciler's `move`: a row whose ends moved)
clears the old row's ends the same way; `delete` (a link removed) waits for
the kernel, so a removed link leaves nothing behind when it returns.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

from ..tables.links import LinkRow
from . import iface, rtnl
from .aside import Reaper
from .errors import SpecError, blame
from .lifecycle import Target, claim, create_marked, delete_end
from .names import BUILD_GROUP, Mark, Role, temp_name
from .netns import Netns, netlink, open_netns

KIND = "veth"


class VethDriver:
    def __init__(self, reaper: Reaper | None = None) -> None:
        """`reaper`: what deletes the ends set aside (default: one of its own)."""
        self._reaper = reaper if reaper is not None else Reaper()

    def update(self, row: LinkRow) -> None:
        mark = Mark(row.namespace, row.uid)
        for end in (row.local, row.peer):
            iface.check(mark.link, end.netns, end.intf, end.ip, row.mtu, end.mac)
        with ExitStack() as stack:
            with blame(mark.link, row.local.netns, row.local.intf):
                lns = stack.enter_context(open_netns(row.local.netns))
                lipr = stack.enter_context(netlink(lns))
                local = claim(mark, lipr, row.local.netns, row.local.intf)
            with blame(mark.link, row.peer.netns, row.peer.intf):
                pns = stack.enter_context(open_netns(row.peer.netns))
                pipr = stack.enter_context(netlink(pns))
                peer = claim(mark, pipr, row.peer.netns, row.peer.intf)
            if lns.identity == pns.identity and row.local.intf == row.peer.intf:
                raise SpecError(
                    mark.link, row.peer.netns, row.peer.intf, "both ends have one name in one netns"
                )
            if local is None or peer is None or not _paired(lipr, lns, local, pipr, pns, peer):
                with blame(mark.link, row.local.netns, row.local.intf):
                    local, peer = self._rebuild(row, mark, (lipr, lns, local), (pipr, pns, peer))
            with blame(mark.link, row.local.netns, row.local.intf):
                iface.converge(lipr, local, mark, row.mtu, row.local.ip)
            with blame(mark.link, row.peer.netns, row.peer.intf):
                iface.converge(pipr, peer, mark, row.mtu, row.peer.ip)

    def delete(self, row: LinkRow) -> None:
        """Remove both ends if they are this link's veths; a gone netns or end is success."""
        self._clear(row, None)

    def vacate(self, row: LinkRow) -> None:
        """Free both ends' names for the row that replaces `row` (its ends moved: a pod
        restarted in a new netns) at once: each end is set aside and deleted a
        moment later (`Reaper`); a gone netns or end is success."""
        self._clear(row, self._reaper)

    def _clear(self, row: LinkRow, reaper: Reaper | None) -> None:
        mark = Mark(row.namespace, row.uid)
        for end, temp in zip((row.local, row.peer), _temps(row), strict=True):
            with blame(mark.link, end.netns, end.intf):
                delete_end(end.netns, end.intf, KIND, mark, temp, reaper)

    def _rebuild(
        self,
        row: LinkRow,
        mark: Mark,
        local: tuple[Any, Netns, iface.Iface | None],
        peer: tuple[Any, Netns, iface.Iface | None],
    ) -> tuple[iface.Iface, iface.Iface]:
        for ipr, ns, found in (local, peer):
            if found is not None:
                self._reaper.set_aside(ipr, ns, found)
        create = rtnl.new_veth(
            row.local.intf,
            row.peer.intf,
            peer[1].fd,
            row.mtu,
            group=BUILD_GROUP,
            mac=row.local.mac,
            peer_mac=row.peer.mac,
        )
        # Asked of the local end's netns, where that end is made; the peer's
        # goes straight into its own.
        made = create_marked(
            mark,
            lambda: local[0].rtnl.request(create),
            [Target(local[1], local[0], row.local.intf), Target(peer[1], peer[0], row.peer.intf)],
        )
        return made[0], made[1]


def _temps(row: LinkRow) -> tuple[str, str]:
    return temp_name(row.key, Role.VETH_LOCAL), temp_name(row.key, Role.VETH_PEER)


def _paired(
    lipr: Any, lns: Netns, local: iface.Iface, pipr: Any, pns: Netns, peer: iface.Iface
) -> bool:
    """Whether `local` and `peer` are the two ends of one veth, each in its own netns."""
    return (
        local.kind == KIND
        and peer.kind == KIND
        and local.link == peer.index
        and peer.link == local.index
        and iface.links_into(lipr, local, lns, pns)
        and iface.links_into(pipr, peer, pns, lns)
    )
