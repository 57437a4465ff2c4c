"""rtnetlink without pyroute2, for the requests that build a link: a codec and a thin socket.

pyroute2 spends an event loop turn and a full message decode of Python on
each request, many times what the kernel takes, and building a veth pair
takes about eleven requests. The requests on that path are coded here by
hand: read an interface by name (`get_link`), create a veth pair or a vxlan
device in place (`new_veth`, `new_vxlan`), change an interface (`set_link`:
name, alias, MAC, MTU, up or down), delete one (`del_link`), add or remove an
address (`new_address`, `del_address`), and what a full
pass reads back: an interface's addresses (`get_addresses`) and the id a
netns gives another (`get_nsid`). Everything else stays with pyroute2.

The codec is pure (bytes in, bytes or values out) and checked against
pyroute2's own decoder in the tests. `Rtnl` sends one request and reads its
answer; every request asks for an ack, so each ends with NLMSG_ERROR. A
refusal raises pyroute2's `NetlinkError(code, message)`, the message being the
kernel's extended ack when it gave one, exactly as pyroute2 raises it, so
callers handle both paths alike.

The IFLA_INFO_DATA of a vxlan or macvlan device is decoded here for the
attributes the drivers read, under pyroute2's names and in pyroute2's values
(`INFO_DATA`), checked against pyroute2 in the tests; that of any other kind
is left to pyroute2 (`parse_link` returns None), so what the drivers read
never depends on the path it took.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pyroute2.netlink.exceptions import NetlinkError

NLMSG_HDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
IFADDRMSG = struct.Struct("=BBBBI")  # family, prefixlen, flags, scope, index
NLA_HDR = struct.Struct("=HH")
NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED, NLA_F_NET_BYTEORDER

NLMSG_ERROR = 2
NLMSG_DONE = 3
RTM_NEWLINK = 16
RTM_DELLINK = 17
RTM_GETLINK = 18
RTM_NEWADDR = 20
RTM_DELADDR = 21
RTM_GETADDR = 22
RTM_NEWNSID = 88
RTM_GETNSID = 90

NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_DUMP = 0x300
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
# In an NLMSG_ERROR's own header: the request was not echoed in full, and
# extended-ack attributes follow it.
NLM_F_CAPPED = 0x100
NLM_F_ACK_TLVS = 0x200
NLMSGERR_ATTR_MSG = 1

SOL_NETLINK = 270
NETLINK_EXT_ACK = 11
NETLINK_GET_STRICT_CHK = 12

IFF_UP = 0x1
IFLA_ADDRESS = 1
IFLA_IFNAME = 3
IFLA_MTU = 4
IFLA_LINK = 5
IFLA_LINKINFO = 18
IFLA_IFALIAS = 20
IFLA_STATS64 = 23
IFLA_AF_SPEC = 26
IFLA_GROUP = 27
IFLA_NET_NS_FD = 28
IFLA_CARRIER = 33
IFLA_GSO_MAX_SIZE = 41
IFLA_LINK_NETNSID = 37
IFLA_INFO_KIND = 1
IFLA_INFO_DATA = 2
VETH_INFO_PEER = 1
IFLA_VXLAN_ID = 1
IFLA_VXLAN_GROUP = 2
IFLA_VXLAN_PORT = 15
IFLA_VXLAN_GROUP6 = 16
IFLA_MACVLAN_MODE = 1
IFLA_INET6_ADDR_GEN_MODE = 8
IN6_ADDR_GEN_MODE_NONE = 1
# IFLA_MACVLAN_MODE's values as pyroute2 names them.
MACVLAN_MODES = {1: "private", 2: "vepa", 4: "bridge", 8: "passthru", 16: "source"}

IFA_ADDRESS = 1
IFA_LOCAL = 2
IFA_PROTO = 11

NETNSA_NSID = 1
NETNSA_FD = 3

RECV_BYTES = 65536


# -- codec ----------------------------------------------------------------------


def attr(kind: int, payload: bytes) -> bytes:
    """One attribute, padded to 4 bytes."""
    length = NLA_HDR.size + len(payload)
    return NLA_HDR.pack(length, kind) + payload + b"\0" * (-length % 4)


def attr_str(kind: int, value: str) -> bytes:
    return attr(kind, value.encode() + b"\0")


def attr_u32(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=I", value))


def attrs(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(type, payload) of each attribute in `data`; a truncated tail is ignored."""
    offset = 0
    while offset + NLA_HDR.size <= len(data):
        length, kind = NLA_HDR.unpack_from(data, offset)
        if length < NLA_HDR.size or offset + length > len(data):
            return
        yield kind & NLA_TYPE_MASK, data[offset + NLA_HDR.size : offset + length]
        offset += (length + 3) & ~3


def message(kind: int, flags: int, seq: int, body: bytes) -> bytes:
    return NLMSG_HDR.pack(NLMSG_HDR.size + len(body), kind, flags, seq, 0) + body


def messages(data: bytes) -> Iterator[tuple[int, int, int, bytes]]:
    """(type, flags, seq, body) of each message in a datagram."""
    offset = 0
    while offset + NLMSG_HDR.size <= len(data):
        length, kind, flags, seq, _ = NLMSG_HDR.unpack_from(data, offset)
        if length < NLMSG_HDR.size or offset + length > len(data):
            return
        yield kind, flags, seq, data[offset + NLMSG_HDR.size : offset + length]
        offset += (length + 3) & ~3


def ack_error(flags: int, body: bytes) -> NetlinkError | None:
    """The refusal an NLMSG_ERROR body carries, or None for an ack."""
    (code,) = struct.unpack_from("=i", body)
    if code == 0:
        return None
    text = ""
    if flags & NLM_F_ACK_TLVS:
        echoed = NLMSG_HDR.unpack_from(body, 4)[0]
        skip = 4 + (NLMSG_HDR.size if flags & NLM_F_CAPPED else echoed)
        for kind, payload in attrs(body[(skip + 3) & ~3 :]):
            if kind == NLMSGERR_ATTR_MSG:
                text = payload.rstrip(b"\0").decode(errors="replace")
    return NetlinkError(-code, text or os.strerror(-code))


def get_link(name: str) -> tuple[int, int, bytes]:
    """(type, flags, body) of the request for interface `name`."""
    return RTM_GETLINK, 0, IFINFOMSG.pack(0, 0, 0, 0, 0) + attr_str(IFLA_IFNAME, name)


def dump_links() -> tuple[int, int, bytes]:
    """Every interface of the netns."""
    return RTM_GETLINK, NLM_F_DUMP, IFINFOMSG.pack(0, 0, 0, 0, 0)


def del_link(index: int) -> tuple[int, int, bytes]:
    """Delete interface `index` (a veth: both ends); ENODEV if it is gone."""
    return RTM_DELLINK, 0, IFINFOMSG.pack(0, 0, index, 0, 0)


def new_veth(
    name: str,
    peer: str,
    peer_netns_fd: int,
    mtu: int = 0,
    *,
    group: int = 0,
    mac: str = "",
    peer_mac: str = "",
    gso_max_size: int = 0,
) -> tuple[int, int, bytes]:
    """Create veth `name` here and its peer `peer` straight in the netns of `peer_netns_fd`,
    both at `mtu` (0: the kernel's default) and in interface group `group` (0: the
    default), with MAC `mac` and `peer_mac` ("": random) and both taking GSO packets
    of at most `gso_max_size` bytes (0: the kernel's default); fails with EEXIST if a
    name is taken."""
    gso = attr_u32(IFLA_GSO_MAX_SIZE, gso_max_size) if gso_max_size else b""
    peer_attrs = attr_str(IFLA_IFNAME, peer) + attr_u32(IFLA_NET_NS_FD, peer_netns_fd)
    own = attr_str(IFLA_IFNAME, name) + _created_attrs(mtu, group, mac) + gso
    peer_attrs += _created_attrs(mtu, group, peer_mac) + gso
    peer_info = attr(VETH_INFO_PEER, IFINFOMSG.pack(0, 0, 0, 0, 0) + peer_attrs)
    info = attr_str(IFLA_INFO_KIND, "veth") + attr(IFLA_INFO_DATA, peer_info)
    body = IFINFOMSG.pack(0, 0, 0, 0, 0) + own + attr(IFLA_LINKINFO, info)
    return RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, body


def new_vxlan(
    name: str,
    netns_fd: int,
    vni: int,
    remote: ipaddress.IPv4Address | ipaddress.IPv6Address,
    port: int,
    mtu: int = 0,
    *,
    group: int = 0,
    mac: str = "",
) -> tuple[int, int, bytes]:
    """Create vxlan `name` (VNI `vni`, to `remote` on UDP `port`) from this netns, where
    its socket lives, straight into the netns of `netns_fd`, in interface group
    `group` with MAC `mac` (as `new_veth`); fails with EEXIST if the name is
    taken there or the VNI and port are held here."""
    own = attr_str(IFLA_IFNAME, name) + attr_u32(IFLA_NET_NS_FD, netns_fd)
    own += _created_attrs(mtu, group, mac)
    group_attr = IFLA_VXLAN_GROUP6 if remote.version == 6 else IFLA_VXLAN_GROUP
    data = (
        attr_u32(IFLA_VXLAN_ID, vni)
        + attr(group_attr, remote.packed)
        + attr(IFLA_VXLAN_PORT, struct.pack("!H", port))
    )
    info = attr_str(IFLA_INFO_KIND, "vxlan") + attr(IFLA_INFO_DATA, data)
    body = IFINFOMSG.pack(0, 0, 0, 0, 0) + own + attr(IFLA_LINKINFO, info)
    return RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, body


def _mac_attr(mac: str) -> bytes:
    """IFLA_ADDRESS of `mac` ("02:00:5e:10:00:01")."""
    return attr(IFLA_ADDRESS, bytes.fromhex(mac.replace(":", "")))


def _created_attrs(mtu: int, group: int, mac: str) -> bytes:
    """What creation sets beside the name: MTU, group and MAC, each if given."""
    out = attr_u32(IFLA_MTU, mtu) if mtu else b""
    if group:
        out += attr_u32(IFLA_GROUP, group)
    if mac:
        out += _mac_attr(mac)
    return out


def set_link(
    index: int,
    *,
    name: str = "",
    alias: str = "",
    mac: str = "",
    mtu: int = 0,
    up: bool = False,
    down: bool = False,
    group: int | None = None,
) -> tuple[int, int, bytes]:
    """Change interface `index`: each of name, alias, MAC and MTU given (not empty or 0),
    its interface group if `group` is not None, and raise it if `up` or take it down
    if `down`; all in one request, applied by the kernel under one lock (the name
    first, the up state last)."""
    flags = IFF_UP if up else 0
    change = IFF_UP if up or down else 0
    body = IFINFOMSG.pack(0, 0, index, flags, change)
    if name:
        body += attr_str(IFLA_IFNAME, name)
    if alias:
        # The kernel takes the alias as it is, no terminating NUL (IFALIASZ counts bytes).
        body += attr(IFLA_IFALIAS, alias.encode())
    if mac:
        body += _mac_attr(mac)
    if mtu:
        body += attr_u32(IFLA_MTU, mtu)
    if group is not None:
        body += attr_u32(IFLA_GROUP, group)
    return RTM_NEWLINK, 0, body


def no_ipv6_addresses(index: int) -> tuple[int, int, bytes]:
    """Interface `index` gets no IPv6 address of its own (no link-local: it sends no
    router or neighbour solicitation); asked before it is first raised."""
    mode = attr(IFLA_INET6_ADDR_GEN_MODE, bytes([IN6_ADDR_GEN_MODE_NONE]))
    body = IFINFOMSG.pack(0, 0, index, 0, 0) + attr(IFLA_AF_SPEC, attr(socket.AF_INET6, mode))
    return RTM_NEWLINK, 0, body


def new_address(
    index: int,
    address: ipaddress.IPv4Interface | ipaddress.IPv6Interface,
    proto: int,
    flags: int = 0,
) -> tuple[int, int, bytes]:
    """Add `address` to interface `index`, tagged `proto` (IFA_PROTO), with ifa_flags `flags`.

    IPv4 names the address as IFA_LOCAL and IFA_ADDRESS (a broadcast network:
    both the same), IPv6 as IFA_ADDRESS, as `ip address add` does.
    """
    family = socket.AF_INET if address.version == 4 else socket.AF_INET6
    packed = address.ip.packed
    body = IFADDRMSG.pack(family, address.network.prefixlen, flags, 0, index)
    if address.version == 4:
        body += attr(IFA_LOCAL, packed)
    body += attr(IFA_ADDRESS, packed) + attr(IFA_PROTO, bytes([proto]))
    return RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, body


def del_address(address: Address) -> tuple[int, int, bytes]:
    """Remove `address` (as `parse_address` read it) from its interface."""
    family = socket.AF_INET if address.interface.version == 4 else socket.AF_INET6
    body = IFADDRMSG.pack(family, address.prefixlen, 0, 0, address.index)
    if address.local:
        body += attr(IFA_LOCAL, ipaddress.ip_address(address.local).packed)
    if address.address:
        body += attr(IFA_ADDRESS, ipaddress.ip_address(address.address).packed)
    return RTM_DELADDR, 0, body


def get_addresses(index: int) -> tuple[int, int, bytes]:
    """Dump the addresses of interface `index`, every family. On a strict-checking
    socket (`Rtnl` makes them so) the kernel sends only that interface's."""
    return RTM_GETADDR, NLM_F_DUMP, IFADDRMSG.pack(0, 0, 0, 0, index)


def get_nsid(netns_fd: int) -> tuple[int, int, bytes]:
    """The id this netns gives the netns of `netns_fd` (IFLA_LINK_NETNSID refers to it)."""
    # struct rtgenmsg: the family, padded to 4 bytes.
    return RTM_GETNSID, 0, struct.pack("=B3x", 0) + attr_u32(NETNSA_FD, netns_fd)


def parse_nsid(body: bytes) -> int | None:
    """The id an RTM_NEWNSID body gives, None if none is assigned (-1) or given."""
    for key, payload in attrs(body[4:]):
        if key == NETNSA_NSID:
            (nsid,) = struct.unpack_from("=i", payload)
            return nsid if nsid >= 0 else None
    return None


@dataclass(frozen=True, slots=True)
class Address:
    """An RTM_NEWADDR message as the drivers read it."""

    index: int
    prefixlen: int
    # IFA_LOCAL and IFA_ADDRESS as text ("" when absent): IPv4 names the
    # interface's own address in IFA_LOCAL, IPv6 in IFA_ADDRESS.
    local: str
    address: str
    proto: int | None

    @property
    def interface(self) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
        return ipaddress.ip_interface(f"{self.local or self.address}/{self.prefixlen}")


def parse_address(body: bytes) -> Address:
    family, prefixlen, _, _, index = IFADDRMSG.unpack_from(body)
    local = address = ""
    proto = None
    for key, payload in attrs(body[IFADDRMSG.size :]):
        if key in (IFA_LOCAL, IFA_ADDRESS):
            text = socket.inet_ntop(family, payload)
            if key == IFA_LOCAL:
                local = text
            else:
                address = text
        elif key == IFA_PROTO:
            proto = payload[0]
    return Address(index, prefixlen, local, address, proto)


def parse_name(body: bytes) -> str:
    """The IFLA_IFNAME of an RTM_NEWLINK body ("" if it has none)."""
    for key, payload in attrs(body[IFINFOMSG.size :]):
        if key == IFLA_IFNAME:
            return payload.rstrip(b"\0").decode()
    return ""


@dataclass(frozen=True, slots=True)
class Link:
    """An RTM_NEWLINK message as the drivers read it (`iface.Iface` is made from it)."""

    index: int
    flags: int
    name: str
    mtu: int
    alias: str | None
    link: int
    link_netnsid: int | None
    kind: str
    group: int = 0
    # IFLA_INFO_DATA attributes the drivers read, by pyroute2's names (see INFO_DATA).
    info: dict[str, Any] = field(default_factory=dict)


def _vxlan_data(payload: bytes) -> dict[str, Any] | None:
    info: dict[str, Any] = {}
    for key, value in attrs(payload):
        if key == IFLA_VXLAN_ID:
            (info["IFLA_VXLAN_ID"],) = struct.unpack_from("=I", value)
        elif key == IFLA_VXLAN_GROUP:
            info["IFLA_VXLAN_GROUP"] = str(ipaddress.IPv4Address(value[:4]))
        elif key == IFLA_VXLAN_GROUP6:
            info["IFLA_VXLAN_GROUP6"] = str(ipaddress.IPv6Address(value[:16]))
        elif key == IFLA_VXLAN_PORT:
            (info["IFLA_VXLAN_PORT"],) = struct.unpack_from("!H", value)
    return info


def _macvlan_data(payload: bytes) -> dict[str, Any] | None:
    for key, value in attrs(payload):
        if key == IFLA_MACVLAN_MODE:
            (mode,) = struct.unpack_from("=I", value)
            if mode not in MACVLAN_MODES:
                return None
            return {"IFLA_MACVLAN_MODE": MACVLAN_MODES[mode]}
    return {}


# The kinds whose IFLA_INFO_DATA is decoded here: kind -> decoder (None: leave it to
# pyroute2).
INFO_DATA: dict[str, Callable[[bytes], dict[str, Any] | None]] = {
    "vxlan": _vxlan_data,
    "macvlan": _macvlan_data,
}


def parse_link(body: bytes) -> Link | None:
    """The fields of an RTM_NEWLINK body; None if it carries IFLA_INFO_DATA of a kind
    not in INFO_DATA (decode those with pyroute2, whose attribute names the drivers
    read)."""
    _, _, index, flags, _ = IFINFOMSG.unpack_from(body)
    name, mtu, alias, link, netnsid, kind, group = "", 0, None, 0, None, "", 0
    data: bytes | None = None
    for key, payload in attrs(body[IFINFOMSG.size :]):
        if key == IFLA_IFNAME:
            name = payload.rstrip(b"\0").decode()
        elif key == IFLA_MTU:
            (mtu,) = struct.unpack_from("=I", payload)
        elif key == IFLA_IFALIAS:
            alias = payload.rstrip(b"\0").decode(errors="replace")
        elif key == IFLA_LINK:
            (link,) = struct.unpack_from("=I", payload)
        elif key == IFLA_LINK_NETNSID:
            (netnsid,) = struct.unpack_from("=i", payload)
        elif key == IFLA_GROUP:
            (group,) = struct.unpack_from("=I", payload)
        elif key == IFLA_LINKINFO:
            for info_key, info in attrs(payload):
                if info_key == IFLA_INFO_KIND:
                    kind = info.rstrip(b"\0").decode()
                elif info_key == IFLA_INFO_DATA:
                    data = info
    info_data: dict[str, Any] = {}
    if data is not None:
        decode = INFO_DATA.get(kind)
        decoded = decode(data) if decode is not None else None
        if decoded is None:
            return None
        info_data = decoded
    return Link(index, flags, name, mtu, alias, link, netnsid, kind, group, info_data)


# -- socket ---------------------------------------------------------------------


class Rtnl:
    """One NETLINK_ROUTE socket (it stays in the netns it was created in); takes
    ownership of `sock`. One request at a time, from one thread at a time."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
        sock.setsockopt(SOL_NETLINK, NETLINK_GET_STRICT_CHK, 1)
        sock.bind((0, 0))
        self._seq = 0
        # False from a request's send until its answer was read in full (or refused).
        self.answered = True

    def request(self, request: tuple[int, int, bytes]) -> list[tuple[int, bytes]]:
        """Send `request` (as the builders above give it); the (type, body) of each
        message answering it before its ack (a dump: before its NLMSG_DONE). Raises
        NetlinkError for a refusal."""
        kind, flags, body = request
        self._seq += 1
        seq = self._seq
        self.answered = False
        self._sock.send(message(kind, flags | NLM_F_REQUEST | NLM_F_ACK, seq, body))
        replies: list[tuple[int, bytes]] = []
        while True:
            data = self._sock.recv(RECV_BYTES)
            for reply_kind, reply_flags, reply_seq, reply in messages(data):
                if reply_seq != seq:
                    continue  # an answer to an earlier request this socket gave up on
                if reply_kind == NLMSG_ERROR:
                    self.answered = True
                    error = ack_error(reply_flags, reply)
                    if error is not None:
                        raise error
                    return replies
                if reply_kind == NLMSG_DONE:
                    # A dump's end: no ack follows it; it carries the dump's error.
                    self.answered = True
                    (code,) = struct.unpack_from("=i", reply) if len(reply) >= 4 else (0,)
                    if code < 0:
                        raise NetlinkError(-code, os.strerror(-code))
                    return replies
                replies.append((reply_kind, reply))

    def close(self) -> None:
        self._sock.close()
