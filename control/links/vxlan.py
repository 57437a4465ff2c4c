"""vxlan: the peer pod runs on another node; a vxlan device in the node's netns.

The pod holds a pod end (podend.py), `local.intf` in `local.netns`. The
device, `iface_names.node_name(row key, VXLAN)` in the node's netns, carries VNI
`row.vni` to `row.peer_node_ip` on UDP port `port`, and is stitched to the
pod end's node side (tc.py). A device whose VNI, remote or port differs from
the row is deleted and built again (the kernel cannot change them in place)
behind the pod end, which stays as it is.

The VNI must be unique per host netns and port: the kernel refuses a second
device with the same one. When a device meshwire did not create holds it in the
host netns, that is a `SpecError` naming the device (meshwire's VNIs are unique
by construction, so nothing meshwire does will free it); otherwise the holder is
meshwire's own old device of a link being rebuilt, about to go (`LinkError`,
retried).
"""

from __future__ import annotations

import errno
import ipaddress
from collections.abc import Collection
from contextlib import ExitStack
from typing import Any

from pyroute2.netlink.exceptions import NetlinkError

from ..common.config import VxlanConfig, default
from ..tables.links import LinkRow
from . import iface, podend, rtnl, tc
from .announce import Announcer
from .aside import Reaper
from .driver_errors import SpecError, blame
from .iface_names import BUILD_GROUP, Mark, NodeRole, node_name
from .lifecycle import Target, claim, create_marked
from .netns import CURRENT, NetnsGone, NotANetns, netlink, open_netns
from .podend import Side

KIND = "vxlan"
VXLAN_PORT: int = default(VxlanConfig, "port")
MAX_VNI = 2**24 - 1


class VxlanDriver:
    def __init__(
        self,
        host_netns: str = "",
        port: int = VXLAN_PORT,
        announcer: Announcer | None = None,
        reaper: Reaper | None = None,
    ) -> None:
        """`host_netns`: the node's netns, where devices, their UDP sockets and the pod
        ends' node sides are ("": the caller's); `announcer`: where new ends'
        announcements are queued (default: one of its own); `reaper`: what deletes
        node sides set aside (default: one of its own)."""
        self._host = host_netns or CURRENT
        self._port = port
        self._announcer = announcer if announcer is not None else Announcer()
        self._reaper = reaper if reaper is not None else Reaper()

    def update(self, row: LinkRow) -> None:
        mark = Mark(row.namespace, row.uid)
        end = row.local
        iface.check(mark.link, end.netns, end.intf, end.ip, row.mtu, end.mac)
        remote = _remote(row, mark)
        want = {
            "IFLA_VXLAN_ID": row.vni,
            "IFLA_VXLAN_GROUP6" if remote.version == 6 else "IFLA_VXLAN_GROUP": str(remote),
            "IFLA_VXLAN_PORT": self._port,
        }
        name = node_name(row.key, NodeRole.VXLAN)
        with ExitStack() as stack, blame(mark.link, end.netns, end.intf):
            hns = stack.enter_context(open_netns(self._host))
            node = Side(hns, stack.enter_context(netlink(hns)))
            ns = stack.enter_context(open_netns(end.netns))
            pod = Side(ns, stack.enter_context(netlink(ns)))
            pod_end = podend.ensure(mark, end, row.kind, row.mtu, pod, node, self._reaper)
            found = claim(mark, node.ipr, self._host, name)
            if found is None or found.kind != KIND or not _has(found, want):
                if found is not None:
                    iface.delete(node.ipr, found.index)
                add = rtnl.new_vxlan(
                    name, hns.fd, row.vni, remote, self._port, row.mtu, group=BUILD_GROUP
                )
                (found,) = create_marked(
                    mark,
                    lambda: self._add(node.ipr, add, row, name),
                    [Target(hns, node.ipr, name, up=False)],
                )
            # Stitched before it is raised: the kernel takes an interface that is up
            # down for a moment to give it a qdisc, which waits for every CPU under
            # its netlink lock.
            tc.stitch(node.ipr, pod_end.node.index, found.index)
            tc.stitch(node.ipr, found.index, pod_end.node.index)
            iface.converge(node.ipr, found, mark, row.mtu, "")
            podend.set_carrier(node, pod_end, True)
            if pod_end.pod.fresh:
                self._announcer.later(end)

    def delete(self, row: LinkRow, keep: Collection[tuple[str, str]] = ()) -> None:
        """Remove the device, and the pod end unless it is in `keep` (netns, intf) or
        another transport holds it now; a gone netns, device or end is success."""
        mark = Mark(row.namespace, row.uid)
        name = node_name(row.key, NodeRole.VXLAN)
        with blame(mark.link, row.local.netns, row.local.intf):
            try:
                with open_netns(self._host) as hns, netlink(hns) as ipr:
                    node = Side(hns, ipr)
                    found = iface.find(ipr, name)
                    ours = found is not None and (found.mark == mark or found.half_made)
                    if (row.local.netns, row.local.intf) not in keep:
                        podend.release(mark, row.local, node, row.kind)
                    if found is not None and ours:
                        iface.delete(ipr, found.index)
            except (NetnsGone, NotANetns):
                return

    def _add(self, host: Any, add: tuple[int, int, bytes], row: LinkRow, name: str) -> None:
        """Create the device (`add`), without an IPv6 address of its own: it would send
        solicitations to the far pod."""
        try:
            host.rtnl.request(add)
            made = iface.find(host, name)
            if made is not None:
                host.rtnl.request(rtnl.no_ipv6_addresses(made.index))
        except NetlinkError as exc:
            if exc.code != errno.EEXIST:
                raise
            holder = next(
                (
                    found
                    for found in iface.dump(host)
                    if found.kind == KIND
                    and found.mark is None
                    and found.info.get("IFLA_VXLAN_ID") == row.vni
                    and found.info.get("IFLA_VXLAN_PORT", self._port) == self._port
                ),
                None,
            )
            if holder is None:
                raise
            raise SpecError(
                f"{row.namespace}/{row.uid}",
                row.local.netns,
                row.local.intf,
                f"VNI {row.vni} (UDP port {self._port}) is held by vxlan device "
                f"{holder.name!r} on this node, which meshwire did not create: remove it, "
                "or move meshwire's VNIs away with vxlan.vni_base",
            ) from exc


def _remote(row: LinkRow, mark: Mark) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if not 1 <= row.vni <= MAX_VNI:
        raise SpecError(
            mark.link, row.local.netns, row.local.intf, f"vni {row.vni} is not 1..{MAX_VNI}"
        )
    try:
        return ipaddress.ip_address(row.peer_node_ip)
    except ValueError:
        raise SpecError(
            mark.link,
            row.local.netns,
            row.local.intf,
            f"peer_node_ip {row.peer_node_ip!r} is not an IP address",
        ) from None


def _has(found: iface.Iface, want: dict[str, object]) -> bool:
    return all(found.info.get(name) == value for name, value in want.items())
