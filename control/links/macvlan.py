"""macvlan: `peer_pod: localhost`, the pod reaches a host interface.

A macvlan in bridge mode on the host interface `peer.intf` (in the row's
`peer.netns` if it names one, else the host netns), created from there straight
into the pod netns as `local.intf`, with the local address, MTU, up and marked. A macvlan on another
lower device or in another mode is rebuilt; a host interface that does not exist
is a `SpecError` naming it.
"""

from __future__ import annotations

from collections.abc import Collection
from contextlib import ExitStack
from typing import Any

from ..tables.links import LinkRow
from . import iface
from .announce import Announcer
from .driver_errors import SpecError, blame
from .iface_names import BUILD_GROUP, Mark, Role, temp_name
from .lifecycle import Target, claim, create_marked, delete_end
from .netns import CURRENT, Netns, netlink, open_netns

KIND = "macvlan"
# IFLA_MACVLAN_MODE as pyroute2 decodes it.
MACVLAN_MODE_BRIDGE = "bridge"


class MacvlanDriver:
    def __init__(self, host_netns: str = "", announcer: Announcer | None = None) -> None:
        """`host_netns`: where host interfaces are and macvlans are created ("": the caller's);
        `announcer`: where new ends' announcements are queued (default: one of its own)."""
        self._host = host_netns or CURRENT
        self._announcer = announcer if announcer is not None else Announcer()

    def update(self, row: LinkRow) -> None:
        mark = Mark(row.namespace, row.uid)
        end = row.local
        iface.check(mark.link, end.netns, end.intf, end.ip, row.mtu, end.mac)
        host_path = row.peer.netns or self._host
        with ExitStack() as stack:
            with blame(mark.link, host_path, row.peer.intf):
                hns = stack.enter_context(open_netns(host_path))
                host = stack.enter_context(netlink(hns))
                lower = iface.find(host, row.peer.intf)
            if lower is None:
                raise SpecError(
                    mark.link, host_path, row.peer.intf, "host interface does not exist"
                )
            with blame(mark.link, end.netns, end.intf):
                ns = stack.enter_context(open_netns(end.netns))
                ipr = stack.enter_context(netlink(ns))
                found = claim(mark, ipr, end.netns, end.intf)
                if found is None or not _on(ipr, found, lower, hns, ns):
                    if found is not None:
                        iface.delete(ipr, found.index)
                    add = {
                        "ifname": end.intf,
                        "kind": KIND,
                        "net_ns_fd": ns.fd,
                        "link": lower.index,
                        "macvlan_mode": MACVLAN_MODE_BRIDGE,
                        "group": BUILD_GROUP,
                    }
                    if row.mtu:
                        add["mtu"] = row.mtu
                    if end.mac:
                        add["address"] = end.mac
                    (found,) = create_marked(
                        mark, lambda: host.link("add", **add), [Target(ns, ipr, end.intf)]
                    )
                iface.converge(ipr, found, mark, row.mtu, end.ip)
                if found.fresh:
                    self._announcer.later(end)

    def delete(self, row: LinkRow, keep: Collection[tuple[str, str]] = ()) -> None:
        """Remove the device if it is this link's macvlan and not in `keep` (netns, intf);
        a gone netns or device is success."""
        if (row.local.netns, row.local.intf) in keep:
            return
        mark = Mark(row.namespace, row.uid)
        with blame(mark.link, row.local.netns, row.local.intf):
            temp = temp_name(row.key, Role.MACVLAN)
            delete_end(row.local.netns, row.local.intf, KIND, mark, temp)


def _on(ipr: Any, found: iface.Iface, lower: iface.Iface, hns: Netns, ns: Netns) -> bool:
    """Whether `found` is a bridge-mode macvlan whose lower device is `lower`."""
    return (
        found.kind == KIND
        and found.info.get("IFLA_MACVLAN_MODE") == MACVLAN_MODE_BRIDGE
        and found.link == lower.index
        and iface.links_into(ipr, found, ns, hns)
    )
