"""One interface as the kernel has it, and the attribute fixes every link kind shares.

Everything is read from the kernel on each call (no cache). `converge` changes
only what differs, so converging an interface that is already right sends no
write at all.
"""

from __future__ import annotations

import errno
import ipaddress
from dataclasses import dataclass
from typing import Any

from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

from meshwire.control.model.macs import mac_problem
from meshwire.control.model.name_rules import interface_name_problem
from meshwire.control.model.validate import MAX_MTU, MIN_MTU

from . import rtnl
from .driver_errors import SpecError
from .iface_names import ADDRESS_PROTO, BUILD_GROUP, Mark, parse_mark
from .netns import Netlink, Netns

IFF_UP = rtnl.IFF_UP
IFA_F_NODAD = 0x02

Address = ipaddress.IPv4Interface | ipaddress.IPv6Interface


@dataclass(frozen=True, slots=True)
class Iface:
    index: int
    name: str
    # IFLA_INFO_KIND ("veth", "vxlan", "macvlan", ...), "" for none.
    kind: str
    mark: Mark | None
    mtu: int
    up: bool
    # IFLA_LINK: the veth peer's or the macvlan lower device's ifindex, 0 if none;
    # an ifindex in the netns `link_netnsid` names, or in this one if that is None.
    link: int
    link_netnsid: int | None
    # IFLA_INFO_DATA attributes by name (`IFLA_VXLAN_ID`, `IFLA_MACVLAN_MODE`, ...).
    info: dict[str, Any]
    # IFLA_GROUP: the interface group (0 is the kernel's default).
    group: int = 0
    # Made a moment ago by this daemon (lifecycle.create_marked or create_and_rename):
    # it has no address yet but what the kernel gives every interface, so `converge`
    # need not read its addresses. False for anything read from the kernel.
    fresh: bool = False

    @property
    def half_made(self) -> bool:
        """Created by meshwire and never marked: a build cut short (see iface_names.BUILD_GROUP)."""
        return self.mark is None and self.group == BUILD_GROUP


def _iface(msg: Any) -> Iface:
    linkinfo = msg.get_attr("IFLA_LINKINFO")
    kind = ""
    info: dict[str, Any] = {}
    if linkinfo is not None:
        kind = linkinfo.get_attr("IFLA_INFO_KIND") or ""
        data = linkinfo.get_attr("IFLA_INFO_DATA")
        if data is not None and not isinstance(data, (str, bytes)):
            info = {name: value for name, value in data["attrs"]}
    return Iface(
        index=msg["index"],
        name=msg.get_attr("IFLA_IFNAME"),
        kind=kind,
        mark=parse_mark(msg.get_attr("IFLA_IFALIAS")),
        mtu=msg.get_attr("IFLA_MTU"),
        up=bool(msg["flags"] & IFF_UP),
        link=msg.get_attr("IFLA_LINK") or 0,
        link_netnsid=msg.get_attr("IFLA_LINK_NETNSID"),
        info=info,
        group=msg.get_attr("IFLA_GROUP") or 0,
    )


def find(ipr: Netlink, name: str) -> Iface | None:
    """The interface called `name` in `ipr`'s netns, or None."""
    try:
        replies = ipr.rtnl.request(rtnl.get_link(name))
    except NetlinkError as exc:
        if exc.code == errno.ENODEV:
            return None
        raise
    for kind, body in replies:
        if kind == rtnl.RTM_NEWLINK:
            return from_message(body)
    return None


def from_message(body: bytes) -> Iface:
    """The `Iface` an RTM_NEWLINK body describes (kind-specific data `rtnl.parse_link`
    leaves undecoded through pyroute2's decoder, whose attribute names `Iface.info`
    holds)."""
    link = rtnl.parse_link(body)
    if link is None:
        msg = ifinfmsg(rtnl.message(rtnl.RTM_NEWLINK, 0, 0, body))
        msg.decode()
        return _iface(msg)
    return Iface(
        index=link.index,
        name=link.name,
        kind=link.kind,
        mark=parse_mark(link.alias),
        mtu=link.mtu,
        up=bool(link.flags & IFF_UP),
        link=link.link,
        link_netnsid=link.link_netnsid,
        info=link.info,
        group=link.group,
    )


def set_link(
    ipr: Netlink,
    index: int,
    *,
    name: str = "",
    alias: str = "",
    mac: str = "",
    mtu: int = 0,
    up: bool = False,
    down: bool = False,
    group: int | None = None,
) -> None:
    """Change interface `index` in one request (see `rtnl.set_link`)."""
    ipr.rtnl.request(
        rtnl.set_link(
            index, name=name, alias=alias, mac=mac, mtu=mtu, up=up, down=down, group=group
        )
    )


def dump(ipr: Any) -> list[Iface]:
    return [_iface(msg) for msg in ipr.link("dump")]


def delete(ipr: Netlink, index: int) -> None:
    """Delete interface `index`; one that is already gone is success."""
    try:
        ipr.rtnl.request(rtnl.del_link(index))
    except NetlinkError as exc:
        if exc.code != errno.ENODEV:
            raise


def nsid_of(ipr: Any, ns: Netns) -> int | None:
    """The id `ipr`'s netns gives `ns` (IFLA_LINK_NETNSID refers to it), None if unassigned."""
    for kind, body in ipr.rtnl.request(rtnl.get_nsid(ns.fd)):
        if kind == rtnl.RTM_NEWNSID:
            return rtnl.parse_nsid(body)
    return None


def links_into(ipr: Any, iface: Iface, home: Netns, target: Netns) -> bool:
    """Whether `iface` (in `home`, read through `ipr`) has IFLA_LINK in `target`."""
    if home.identity == target.identity:
        return iface.link_netnsid is None
    return iface.link_netnsid is not None and iface.link_netnsid == nsid_of(ipr, target)


def parse_address(cidr: str) -> Address | None:
    """The address in an End's `ip` ("" means none); ValueError if it does not parse."""
    if not cidr:
        return None
    if "/" not in cidr:
        raise ValueError(f"address {cidr!r} has no prefix length")
    return ipaddress.ip_interface(cidr)


def check(link: str, netns: str, intf: str, cidr: str, mtu: int, mac: str = "") -> None:
    """Raise `SpecError` for an end that no kernel would accept as written."""
    if not netns:
        raise SpecError(link, netns, intf, "the row gives no netns for this end")
    problem = interface_name_problem(intf)
    if problem:
        raise SpecError(link, netns, intf, problem)
    try:
        parse_address(cidr)
    except ValueError as exc:
        raise SpecError(link, netns, intf, f"ip: {exc}") from None
    if mtu and not MIN_MTU <= mtu <= MAX_MTU:
        raise SpecError(link, netns, intf, f"mtu {mtu} is outside {MIN_MTU}..{MAX_MTU}")
    problem = mac_problem(mac) if mac else None
    if problem:
        raise SpecError(link, netns, intf, f"mac: {problem}")


def converge(ipr: Any, iface: Iface, mark: Mark, mtu: int, cidr: str) -> None:
    """Make `iface` marked, at `mtu` (0: leave as is), addressed with `cidr` and up.

    Addresses: `cidr` is added if missing (IPv6 without DAD: a point-to-point link
    has no one to duplicate it). Other addresses are removed only if meshwire
    added them (`ADDRESS_PROTO`), i.e. when the desired address changed; an
    address someone else configured stays. On kernels before 6.1 (no IFA_PROTO)
    a replaced address is left behind.
    """
    alias = mark.format() if iface.mark != mark else ""
    new_mtu = mtu if mtu and iface.mtu != mtu else 0
    if alias or new_mtu:
        set_link(ipr, iface.index, alias=alias, mtu=new_mtu)
    messages = [] if iface.fresh else addresses(ipr, iface.index)
    _converge_addresses(ipr, iface.index, parse_address(cidr), messages)
    if not iface.up:
        set_link(ipr, iface.index, up=True)


def addresses(ipr: Netlink, index: int) -> list[rtnl.Address]:
    """The addresses of interface `index` (every family).

    The request names the ifindex, so on a strict-checking socket (`netns.netlink`
    opens them so) the kernel sends only that interface's addresses: O(its own)
    per call, where filtering a dump of the netns would make a pod with 1,500
    links quadratic. Those of other interfaces, should any come, are dropped.
    """
    return [
        address
        for kind, body in ipr.rtnl.request(rtnl.get_addresses(index))
        if kind == rtnl.RTM_NEWADDR and (address := rtnl.parse_address(body)).index == index
    ]


def _converge_addresses(
    ipr: Any, index: int, want: Address | None, present: list[rtnl.Address]
) -> None:
    """`present`: the interface's addresses, as `addresses` gives them."""
    found = False
    for each in present:
        have = each.interface
        if have == want:
            found = True
        elif each.proto == ADDRESS_PROTO:
            ipr.addr("del", index=index, address=str(have.ip), prefixlen=each.prefixlen)
    if want is not None and not found:
        flags = IFA_F_NODAD if want.version == 6 else 0
        ipr.rtnl.request(rtnl.new_address(index, want, ADDRESS_PROTO, flags))
