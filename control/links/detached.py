"""detached: a pod's link whose far end does not exist now; its pod end without carrier.

The far pod is not running (deleted, restarting, not scheduled yet, or on a
node that no longer tells of it): the pod still holds its interface, as a
router keeps a port whose cable leads nowhere. The row makes the pod end
(podend.py), takes whatever was stitched to its node side away and keeps
that side down, so the pod sees NO-CARRIER on an interface that stays
admin-up, with its ifindex, MAC and address. When the far end is back the
link's row becomes a veth, vxlan or grpc row again and takes the end over as
it is.
"""

from __future__ import annotations

from collections.abc import Collection
from contextlib import ExitStack

from ..tables.links import LinkRow
from . import iface, podend, tc
from .aside import Reaper
from .driver_errors import blame
from .iface_names import Mark
from .netns import CURRENT, NetnsGone, NotANetns, netlink, open_netns
from .podend import Side


class DetachedDriver:
    def __init__(self, host_netns: str = "", reaper: Reaper | None = None) -> None:
        """`host_netns`: the node's netns, where the node sides are ("": the caller's);
        `reaper`: what deletes the node sides set aside (default: one of its own)."""
        self._host = host_netns or CURRENT
        self._reaper = reaper if reaper is not None else Reaper()

    def update(self, row: LinkRow) -> None:
        mark = Mark(row.namespace, row.uid)
        end = row.local
        iface.check(mark.link, end.netns, end.intf, end.ip, row.mtu, end.mac)
        with ExitStack() as stack, blame(mark.link, end.netns, end.intf):
            hns = stack.enter_context(open_netns(self._host))
            node = Side(hns, stack.enter_context(netlink(hns)))
            ns = stack.enter_context(open_netns(end.netns))
            pod = Side(ns, stack.enter_context(netlink(ns)))
            pod_end = podend.ensure(mark, end, row.kind, row.mtu, pod, node, self._reaper)
            podend.set_carrier(node, pod_end, False)
            tc.unstitch(node.ipr, pod_end.node.index)

    def delete(self, row: LinkRow, keep: Collection[tuple[str, str]] = ()) -> None:
        """Remove the pod end unless it is in `keep` or a row of another kind holds it now
        (its far end came back); a gone netns or end is success."""
        if (row.local.netns, row.local.intf) in keep:
            return
        mark = Mark(row.namespace, row.uid)
        with blame(mark.link, row.local.netns, row.local.intf):
            try:
                with open_netns(self._host) as hns, netlink(hns) as ipr:
                    podend.release(mark, row.local, Side(hns, ipr), row.kind)
            except (NetnsGone, NotANetns):
                return
