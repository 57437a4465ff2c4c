"""vxlan: the peer pod runs on another node; one device in the local pod netns.

The device `local.intf` in `local.netns` carries VNI `row.vni` to
`row.peer_node_ip` on UDP port `port`. It is created by a request made in the
host netns straight into the pod netns, so its UDP socket lives in the host
netns (next to the underlay) while the device is the pod's. A device whose VNI, remote or port
differs from the row is deleted and built again (the kernel cannot change them
in place); address, MTU and up state are fixed in place.

The VNI must be unique per host netns and port: the kernel refuses a second
device with the same one (`LinkError`, retried: usually the old device of a link
being rebuilt, about to go).
"""

from __future__ import annotations

import ipaddress
from contextlib import ExitStack

from ..tables.links import LinkRow
from . import iface
from .announce import announce
from .errors import SpecError, blame
from .lifecycle import Placement, claim, create_and_place, delete_end
from .names import Mark, Role, temp_name
from .netns import CURRENT, netlink, open_netns

KIND = "vxlan"
VXLAN_PORT = 4789
MAX_VNI = 2**24 - 1


class VxlanDriver:
    def __init__(self, host_netns: str = "", port: int = VXLAN_PORT) -> None:
        """`host_netns`: where devices are created and their UDP sockets live ("": the caller's)."""
        self._host = host_netns or CURRENT
        self._port = port

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
            found = iface.find(ipr, end.intf)
            claim(mark, found, end.netns, end.intf)
            if found is None or found.kind != KIND or not _has(found, want):
                if found is not None:
                    iface.delete(ipr, found.index)
                temp = temp_name(row.key, Role.VXLAN)
                add = {
                    "ifname": temp,
                    "kind": KIND,
                    "net_ns_fd": ns.fd,
                    "vxlan_id": row.vni,
                    "vxlan_group6" if remote.version == 6 else "vxlan_group": str(remote),
                    "vxlan_port": self._port,
                }
                if row.mtu:
                    add["mtu"] = row.mtu
                with open_netns(self._host) as hns, netlink(hns) as host:
                    (found,) = create_and_place(
                        mark,
                        lambda: host.link("add", **add),
                        [Placement(temp, ns, ipr, end.intf, end.mac)],
                    )
            iface.converge(ipr, found, mark, row.mtu, end.ip)
            if found.fresh:
                announce(ns, end)

    def delete(self, row: LinkRow) -> None:
        """Remove the device if it is this link's vxlan; a gone netns or device is success."""
        mark = Mark(row.namespace, row.uid)
        with blame(mark.link, row.local.netns, row.local.intf):
            temp = temp_name(row.key, Role.VXLAN)
            delete_end(row.local.netns, row.local.intf, KIND, mark, temp)


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
