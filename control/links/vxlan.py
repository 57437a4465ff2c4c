"""vxlan: the peer pod runs on another node; one device in the local pod netns.

The device `local.intf` in `local.netns` carries VNI `row.vni` to
`row.peer_node_ip` on UDP port `port`. It is created by a request made in the
host netns straight into the pod netns, so its UDP socket lives in the host
netns (next to the underlay) while the device is the pod's. A device whose VNI, remote or port
differs from the row is deleted and built again (the kernel cannot change them
in place); address, MTU and up state are fixed in place.

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
from contextlib import ExitStack
from typing import Any

from pyroute2.netlink.exceptions import NetlinkError

from ..common.config import VxlanConfig, default
from ..tables.links import LinkRow
from . import iface, rtnl
from .announce import Announcer
from .errors import SpecError, blame
from .lifecycle import Target, claim, create_marked, delete_end
from .names import BUILD_GROUP, Mark, Role, temp_name
from .netns import CURRENT, netlink, open_netns

KIND = "vxlan"
VXLAN_PORT: int = default(VxlanConfig, "port")
MAX_VNI = 2**24 - 1


class VxlanDriver:
    def __init__(
        self, host_netns: str = "", port: int = VXLAN_PORT, announcer: Announcer | None = None
    ) -> None:
        """`host_netns`: where devices are created and their UDP sockets live ("": the caller's);
        `announcer`: where new ends' announcements are queued (default: one of its own)."""
        self._host = host_netns or CURRENT
        self._port = port
        self._announcer = announcer if announcer is not None else Announcer()

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
        with ExitStack() as stack, blame(mark.link, end.netns, end.intf):
            ns = stack.enter_context(open_netns(end.netns))
            ipr = stack.enter_context(netlink(ns))
            found = claim(mark, ipr, end.netns, end.intf)
            if found is None or found.kind != KIND or not _has(found, want):
                if found is not None:
                    iface.delete(ipr, found.index)
                add = rtnl.new_vxlan(
                    end.intf,
                    ns.fd,
                    row.vni,
                    remote,
                    self._port,
                    row.mtu,
                    group=BUILD_GROUP,
                    mac=end.mac,
                )
                with open_netns(self._host) as hns, netlink(hns) as host:
                    (found,) = create_marked(
                        mark, lambda: self._add(host, add, row), [Target(ns, ipr, end.intf)]
                    )
            iface.converge(ipr, found, mark, row.mtu, end.ip)
            if found.fresh:
                self._announcer.later(end)

    def delete(self, row: LinkRow) -> None:
        """Remove the device if it is this link's vxlan; a gone netns or device is success."""
        mark = Mark(row.namespace, row.uid)
        with blame(mark.link, row.local.netns, row.local.intf):
            temp = temp_name(row.key, Role.VXLAN)
            delete_end(row.local.netns, row.local.intf, KIND, mark, temp)

    def _add(self, host: Any, add: tuple[int, int, bytes], row: LinkRow) -> None:
        try:
            host.rtnl.request(add)
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
