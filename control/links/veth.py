"""veth: both pods on this node; their two pod ends stitched together in the node's netns.

Each end is a pod end (podend.py): `local.intf` in `local.netns` and
`peer.intf` in `peer.netns`, veths whose peers are in the node's netns. The
link is the two node sides stitched to each other, one tc redirect each way
(tc.py), and both raised: each pod sees carrier. The row is the same whichever
pod restarted, so `update` repairs from either side, and a restarted pod's
new end is stitched to its peer's end, which stays as it was.

`delete` (a link removed) deletes both pod ends, waiting for the kernel, so
a removed link leaves nothing behind when it returns; an end that another
transport holds by then (the link moved to the workers, whose row took the
end over) is left to it. `vacate` (the reconciler's `move`) keeps the ends the
new row keeps and sets the others' node sides aside (aside.py), so a
restarted pod's new end waits for no deletion.
"""

from __future__ import annotations

from collections.abc import Collection
from contextlib import ExitStack

from ..tables.links import LinkRow
from . import iface, podend, tc
from .aside import Reaper
from .driver_errors import SpecError, blame
from .iface_names import Mark
from .netns import CURRENT, Netns, NetnsGone, NotANetns, netlink, open_netns
from .podend import Side

KIND = "veth"


class VethDriver:
    def __init__(self, host_netns: str = "", reaper: Reaper | None = None) -> None:
        """`host_netns`: the node's netns, where the node sides are ("": the caller's);
        `reaper`: what deletes the node sides set aside (default: one of its own)."""
        self._host = host_netns or CURRENT
        self._reaper = reaper if reaper is not None else Reaper()

    def update(self, row: LinkRow) -> None:
        mark = Mark(row.namespace, row.uid)
        for end in (row.local, row.peer):
            iface.check(mark.link, end.netns, end.intf, end.ip, row.mtu, end.mac)
        with ExitStack() as stack:
            with blame(mark.link, self._host, "(node)"):
                hns = stack.enter_context(open_netns(self._host))
                node = Side(hns, stack.enter_context(netlink(hns)))
            made: list[podend.PodEnd] = []
            pods: list[Netns] = []
            for end in (row.local, row.peer):
                with blame(mark.link, end.netns, end.intf):
                    ns = stack.enter_context(open_netns(end.netns))
                    if pods and pods[0].identity == ns.identity and row.local.intf == end.intf:
                        raise SpecError(
                            mark.link, end.netns, end.intf, "both ends have one name in one netns"
                        )
                    pods.append(ns)
                    pod = Side(ns, stack.enter_context(netlink(ns)))
                    made.append(
                        podend.ensure(mark, end, row.kind, row.mtu, pod, node, self._reaper)
                    )
            local, peer = made
            with blame(mark.link, self._host, local.node.name):
                tc.stitch(node.ipr, local.node.index, peer.node.index)
                tc.stitch(node.ipr, peer.node.index, local.node.index)
                podend.set_carrier(node, local, True)
                podend.set_carrier(node, peer, True)

    def delete(self, row: LinkRow, keep: Collection[tuple[str, str]] = ()) -> None:
        """Remove both pod ends, but those in `keep` (netns, intf) and those another
        transport holds now; a gone netns or end is success."""
        self._clear(row, keep, None)

    def vacate(self, row: LinkRow, keep: Collection[tuple[str, str]] = ()) -> None:
        """As `delete`, but an end is set aside (its name free at once, deleted a moment
        later) rather than deleted in the caller's time."""
        self._clear(row, keep, self._reaper)

    def _clear(
        self, row: LinkRow, keep: Collection[tuple[str, str]], reaper: Reaper | None
    ) -> None:
        mark = Mark(row.namespace, row.uid)
        with blame(mark.link, self._host, "(node)"):
            try:
                with open_netns(self._host) as hns, netlink(hns) as ipr:
                    for end in (row.local, row.peer):
                        if (end.netns, end.intf) not in keep:
                            podend.release(mark, end, Side(hns, ipr), row.kind, reaper)
            except (NetnsGone, NotANetns):
                return
