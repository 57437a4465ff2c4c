"""The hand-coded rtnetlink requests say what pyroute2 would, and the kernel agrees.

The codec is checked against pyroute2's own decoder (no root); the socket and
the interface reader against the kernel, interface by interface, next to what
pyroute2 reads of the same interface (root).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
from dataclasses import replace

import pytest
from links_helpers import Namespaces, ip, namespaces, needs_root, netns_name
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

from meshwire.control.links import iface, rtnl
from meshwire.control.links.iface_names import ADDRESS_PROTO, BUILD_GROUP
from meshwire.control.links.netns import Netlink, netlink, open_netns

__all__ = ["namespaces"]


def decoded_link(request: tuple[int, int, bytes]) -> ifinfmsg:
    kind, flags, body = request
    msg = ifinfmsg(rtnl.message(kind, flags, 1, body))
    msg.decode()
    return msg


def test_a_link_read_names_the_interface_only() -> None:
    msg = decoded_link(rtnl.get_link("eth1"))
    assert msg["header"]["type"] == rtnl.RTM_GETLINK
    assert (msg["index"], msg["flags"], msg["change"]) == (0, 0, 0)
    assert [name for name, _ in msg["attrs"]] == ["IFLA_IFNAME"]
    assert msg.get_attr("IFLA_IFNAME") == "eth1"


def test_a_delete_names_the_interface_by_index_only() -> None:
    msg = decoded_link(rtnl.del_link(12))
    assert msg["header"]["type"] == rtnl.RTM_DELLINK
    assert (msg["index"], msg["flags"], msg["change"], msg["attrs"]) == (12, 0, 0, [])


def test_a_veth_is_created_with_its_peer_in_the_peer_netns_and_both_mtus() -> None:
    kind, flags, body = rtnl.new_veth("mwtmp0", "mwtmp1", 42, 9000)
    assert kind == rtnl.RTM_NEWLINK
    assert flags == rtnl.NLM_F_CREATE | rtnl.NLM_F_EXCL
    msg = decoded_link((kind, flags, body))
    assert msg.get_attr("IFLA_IFNAME") == "mwtmp0"
    assert msg.get_attr("IFLA_MTU") == 9000
    info = msg.get_attr("IFLA_LINKINFO")
    assert info.get_attr("IFLA_INFO_KIND") == "veth"
    # The peer: an ifinfomsg of its own with its attributes (read by our decoder:
    # pyroute2 decodes VETH_INFO_PEER only in its own requests).
    linkinfo = dict(rtnl.attrs(dict(rtnl.attrs(body[rtnl.IFINFOMSG.size :]))[rtnl.IFLA_LINKINFO]))
    peer = dict(rtnl.attrs(linkinfo[rtnl.IFLA_INFO_DATA]))[rtnl.VETH_INFO_PEER]
    peer_attrs = dict(rtnl.attrs(peer[rtnl.IFINFOMSG.size :]))
    assert peer_attrs[rtnl.IFLA_IFNAME] == b"mwtmp1\0"
    assert struct.unpack("=I", peer_attrs[rtnl.IFLA_NET_NS_FD]) == (42,)
    assert struct.unpack("=I", peer_attrs[rtnl.IFLA_MTU]) == (9000,)


def test_a_veth_without_an_mtu_leaves_it_to_the_kernel() -> None:
    msg = decoded_link(rtnl.new_veth("mwtmp0", "mwtmp1", 42))
    assert msg.get_attr("IFLA_MTU") is None
    assert msg.get_attr("IFLA_GROUP") is None
    assert msg.get_attr("IFLA_ADDRESS") is None


def test_a_veth_is_created_in_a_group_with_each_ends_mac() -> None:
    kind, flags, body = rtnl.new_veth(
        "eth1", "eth2", 42, group=0x6D776972, mac="02:00:00:00:00:01", peer_mac="02:00:00:00:00:02"
    )
    msg = decoded_link((kind, flags, body))
    assert msg.get_attr("IFLA_GROUP") == 0x6D776972
    assert msg.get_attr("IFLA_ADDRESS") == "02:00:00:00:00:01"
    linkinfo = dict(rtnl.attrs(dict(rtnl.attrs(body[rtnl.IFINFOMSG.size :]))[rtnl.IFLA_LINKINFO]))
    peer = dict(rtnl.attrs(linkinfo[rtnl.IFLA_INFO_DATA]))[rtnl.VETH_INFO_PEER]
    peer_attrs = dict(rtnl.attrs(peer[rtnl.IFINFOMSG.size :]))
    assert struct.unpack("=I", peer_attrs[rtnl.IFLA_GROUP]) == (0x6D776972,)
    assert peer_attrs[rtnl.IFLA_ADDRESS] == bytes.fromhex("020000000002")


@pytest.mark.parametrize(
    ("remote", "group"), [("169.254.0.12", "IFLA_VXLAN_GROUP"), ("fd00::12", "IFLA_VXLAN_GROUP6")]
)
def test_a_vxlan_is_created_into_the_pod_netns_with_its_vni_remote_and_port(
    remote: str, group: str
) -> None:
    msg = decoded_link(rtnl.new_vxlan("mwtmp0", 42, 5001, ipaddress.ip_address(remote), 4790, 1400))
    assert msg.get_attr("IFLA_IFNAME") == "mwtmp0"
    assert msg.get_attr("IFLA_NET_NS_FD") == 42
    assert msg.get_attr("IFLA_MTU") == 1400
    info = msg.get_attr("IFLA_LINKINFO")
    assert info.get_attr("IFLA_INFO_KIND") == "vxlan"
    data = info.get_attr("IFLA_INFO_DATA")
    assert data.get_attr("IFLA_VXLAN_ID") == 5001
    assert data.get_attr(group) == remote
    assert data.get_attr("IFLA_VXLAN_PORT") == 4790


def test_a_change_carries_exactly_the_fields_given_and_raises_only_when_asked() -> None:
    msg = decoded_link(
        rtnl.set_link(
            7, name="eth1", alias="meshwire:default/3", mac="02:00:00:00:00:01", mtu=1400, up=True
        )
    )
    assert (msg["index"], msg["flags"], msg["change"]) == (7, rtnl.IFF_UP, rtnl.IFF_UP)
    assert msg.get_attr("IFLA_IFNAME") == "eth1"
    assert msg.get_attr("IFLA_IFALIAS") == "meshwire:default/3"
    assert msg.get_attr("IFLA_ADDRESS") == "02:00:00:00:00:01"
    assert msg.get_attr("IFLA_MTU") == 1400

    only_alias = decoded_link(rtnl.set_link(7, alias="x"))
    assert (only_alias["flags"], only_alias["change"]) == (0, 0)
    assert [name for name, _ in only_alias["attrs"]] == ["IFLA_IFALIAS"]

    aside = decoded_link(rtnl.set_link(7, name="mwold00000007", down=True))
    assert (aside["flags"], aside["change"]) == (0, rtnl.IFF_UP)
    assert [name for name, _ in aside["attrs"]] == ["IFLA_IFNAME"]


@pytest.mark.parametrize(
    ("local", "address", "attrs"),
    [
        ("10.0.0.1", "10.0.0.1", ["IFA_LOCAL", "IFA_ADDRESS"]),
        ("10.0.0.1", "10.0.0.2", ["IFA_LOCAL", "IFA_ADDRESS"]),  # a peer address
        ("", "2001:db8::1", ["IFA_ADDRESS"]),
    ],
)
def test_an_address_is_removed_by_what_the_kernel_read_back(
    local: str, address: str, attrs: list[str]
) -> None:
    read = rtnl.Address(index=5, prefixlen=30, local=local, address=address, proto=None)
    kind, request_flags, body = rtnl.del_address(read)
    assert (kind, request_flags) == (rtnl.RTM_DELADDR, 0)
    msg = ifaddrmsg(rtnl.message(kind, request_flags, 1, body))
    msg.decode()
    family = socket.AF_INET if "." in address else socket.AF_INET6
    assert (msg["family"], msg["prefixlen"], msg["index"]) == (family, 30, 5)
    assert [name for name, _ in msg["attrs"]] == attrs
    assert msg.get_attr("IFA_ADDRESS") == address
    assert msg.get_attr("IFA_LOCAL") == (local or None)


@pytest.mark.parametrize(
    ("cidr", "flags", "attrs"),
    [
        ("10.0.0.1/30", 0, ["IFA_LOCAL", "IFA_ADDRESS", "IFA_PROTO"]),
        ("2001:db8::1/64", iface.IFA_F_NODAD, ["IFA_ADDRESS", "IFA_PROTO"]),
    ],
)
def test_an_address_is_added_as_ip_address_add_adds_it(
    cidr: str, flags: int, attrs: list[str]
) -> None:
    want = ipaddress.ip_interface(cidr)
    kind, request_flags, body = rtnl.new_address(5, want, ADDRESS_PROTO, flags)
    assert kind == rtnl.RTM_NEWADDR
    assert request_flags == rtnl.NLM_F_CREATE | rtnl.NLM_F_EXCL
    msg = ifaddrmsg(rtnl.message(kind, request_flags, 1, body))
    msg.decode()
    family = socket.AF_INET if want.version == 4 else socket.AF_INET6
    assert (msg["family"], msg["prefixlen"], msg["flags"], msg["index"]) == (
        family,
        want.network.prefixlen,
        flags,
        5,
    )
    assert [name for name, _ in msg["attrs"]] == attrs
    assert msg.get_attr("IFA_ADDRESS") == str(want.ip)
    assert msg.get_attr("IFA_PROTO") == ADDRESS_PROTO


def error_body(code: int, flags: int, request: bytes, text: str = "") -> bytes:
    echoed = request if not flags & rtnl.NLM_F_CAPPED else request[: rtnl.NLMSG_HDR.size]
    body = struct.pack("=i", code) + echoed
    if text:
        body += b"\0" * (-len(body) % 4) + rtnl.attr_str(rtnl.NLMSGERR_ATTR_MSG, text)
    return body


def test_an_ack_is_no_error_and_a_refusal_carries_the_kernels_own_words() -> None:
    kind, flags, body = rtnl.get_link("eth1")
    request = rtnl.message(kind, flags, 9, body)
    assert rtnl.ack_error(0, error_body(0, 0, request)) is None

    for flags in (rtnl.NLM_F_ACK_TLVS, rtnl.NLM_F_ACK_TLVS | rtnl.NLM_F_CAPPED):
        error = rtnl.ack_error(flags, error_body(-errno.EEXIST, flags, request, "taken"))
        assert isinstance(error, NetlinkError)
        assert (error.code, error.args[1]) == (errno.EEXIST, "taken")

    plain = rtnl.ack_error(0, error_body(-errno.ENODEV, 0, request))
    assert isinstance(plain, NetlinkError)
    assert (plain.code, plain.args[1]) == (errno.ENODEV, os.strerror(errno.ENODEV))


def test_messages_and_attributes_are_split_at_their_lengths_and_a_torn_tail_is_dropped() -> None:
    one = rtnl.message(rtnl.NLMSG_DONE, 0, 1, b"\0\0\0\0")
    two = rtnl.message(rtnl.RTM_NEWLINK, 2, 2, b"abc")
    datagram = one + two + b"\0" + one[:10]
    assert [(k, f, s) for k, f, s, _ in rtnl.messages(datagram)] == [
        (rtnl.NLMSG_DONE, 0, 1),
        (rtnl.RTM_NEWLINK, 2, 2),
    ]
    data = rtnl.attr_u32(4, 1500) + rtnl.attr_str(3, "eth1") + rtnl.attr(1, b"")[:2]
    assert list(rtnl.attrs(data)) == [(4, struct.pack("=I", 1500)), (3, b"eth1\0")]


# -- against the kernel -----------------------------------------------------------


def pyroute2_view(ipr: Netlink, name: str) -> iface.Iface:
    """The interface as the pyroute2 path reads it."""
    return iface._iface(ipr.ipr.link("get", ifname=name)[0])


# The kind-specific attributes the drivers read, which rtnl decodes itself.
READ_INFO = {
    "vxlan": {"IFLA_VXLAN_ID", "IFLA_VXLAN_PORT"},
    "macvlan": {"IFLA_MACVLAN_MODE"},
}


def assert_reads_as_pyroute2(ipr: Netlink, name: str) -> None:
    """`iface.find` gives what pyroute2 gives; for a kind rtnl decodes, the attributes
    it reads have pyroute2's names and values."""
    ours, theirs = iface.find(ipr, name), pyroute2_view(ipr, name)
    assert ours is not None, name
    if ours.kind in READ_INFO:
        assert READ_INFO[ours.kind] <= set(ours.info), name
        theirs = replace(theirs, info={key: theirs.info.get(key) for key in ours.info})
    assert ours == theirs, name


@needs_root
@pytest.mark.root
def test_every_kind_of_interface_reads_the_same_as_through_pyroute2(
    namespaces: Namespaces,
) -> None:
    pod, peer = namespaces.add("a"), namespaces.add("b")
    name = netns_name(pod)
    ip("-n", name, "link", "add", "d0", "type", "veth", "peer", "name", "d1")
    ip("-n", name, "link", "set", "d0", "alias", "meshwire:default/7", "mtu", "1400", "up")
    ip("-n", name, "link", "add", "vx0", "type", "vxlan", "id", "42", "dstport", "4789")
    ip("-n", name, "link", "add", "vx4", "type", "vxlan", "id", "43", "dstport", "4790",
       "remote", "169.254.0.12")  # fmt: skip
    ip("-n", name, "link", "add", "vx6", "type", "vxlan", "id", "44", "dstport", "4790",
       "remote", "fd00::12")  # fmt: skip
    ip("-n", name, "link", "add", "mv0", "link", "d0", "type", "macvlan", "mode", "bridge")
    ip("-n", name, "link", "add", "br0", "type", "bridge")
    with open_netns(pod) as ns, open_netns(peer) as pns, netlink(ns) as ipr:
        ipr.rtnl.request(rtnl.new_veth("v0", "v1", pns.fd, 9000))
        ipr.rtnl.request(rtnl.new_veth("g0", "g1", pns.fd, group=BUILD_GROUP))
        for each in ("lo", "d0", "vx0", "vx4", "vx6", "mv0", "br0", "v0", "g0"):
            assert_reads_as_pyroute2(ipr, each)
        veth = iface.find(ipr, "v0")
        assert veth is not None and veth.kind == "veth" and veth.mtu == 9000
        assert veth.link_netnsid is not None
        assert veth.group == 0 and not veth.half_made
        grouped = iface.find(ipr, "g0")
        assert grouped is not None and grouped.group == BUILD_GROUP and grouped.half_made
        vxlan = iface.find(ipr, "vx0")
        assert vxlan is not None and vxlan.info["IFLA_VXLAN_ID"] == 42
        remote4, remote6 = iface.find(ipr, "vx4"), iface.find(ipr, "vx6")
        assert remote4 is not None and remote4.info["IFLA_VXLAN_GROUP"] == "169.254.0.12"
        assert remote6 is not None and remote6.info["IFLA_VXLAN_GROUP6"] == "fd00::12"
        assert remote6.info["IFLA_VXLAN_PORT"] == 4790
        macvlan = iface.find(ipr, "mv0")
        assert macvlan is not None and macvlan.info == {"IFLA_MACVLAN_MODE": "bridge"}
        dummy = iface.find(ipr, "d0")
        assert dummy is not None and dummy.up and dummy.mark is not None
        assert iface.find(ipr, "nothere") is None
        with netlink(pns) as pipr:
            assert_reads_as_pyroute2(pipr, "v1")


@needs_root
@pytest.mark.root
def test_a_refusal_is_pyroute2s_error_with_the_kernels_code(namespaces: Namespaces) -> None:
    pod, peer = namespaces.add("a"), namespaces.add("b")
    with open_netns(pod) as ns, open_netns(peer) as pns, netlink(ns) as ipr:
        ipr.rtnl.request(rtnl.new_veth("v0", "v1", pns.fd))
        with pytest.raises(NetlinkError) as taken:
            ipr.rtnl.request(rtnl.new_veth("v0", "v2", pns.fd))
        assert taken.value.code == errno.EEXIST
        # The socket is in step after a refusal: the next answer is its own.
        found = iface.find(ipr, "v0")
        assert found is not None
        iface.delete(ipr, found.index)
        iface.delete(ipr, found.index)  # already gone: success
        assert iface.find(ipr, "v0") is None


@needs_root
@pytest.mark.root
def test_a_change_and_an_address_land_as_pyroute2s_would(namespaces: Namespaces) -> None:
    pod, peer = namespaces.add("a"), namespaces.add("b")
    with open_netns(pod) as ns, open_netns(peer) as pns, netlink(ns) as ipr:
        ipr.rtnl.request(rtnl.new_veth("t0", "t1", pns.fd))
        ipr.rtnl.request(rtnl.new_veth("u0", "u1", pns.fd))
        ours, theirs = iface.find(ipr, "t0"), iface.find(ipr, "u0")
        assert ours is not None and theirs is not None
        iface.set_link(
            ipr, ours.index, name="eth1", alias="meshwire:default/1", mac="02:00:00:00:00:01"
        )
        iface.set_link(ipr, ours.index, mtu=1400, up=True)
        ipr.ipr.link(
            "set",
            index=theirs.index,
            ifname="eth2",
            ifalias="meshwire:default/1",
            address="02:00:00:00:00:02",
            mtu=1400,
            state="up",
        )
        for index, cidr in ((ours.index, "10.0.0.1/30"), (ours.index, "2001:db8::1/64")):
            want = ipaddress.ip_interface(cidr)
            flags = iface.IFA_F_NODAD if want.version == 6 else 0
            ipr.rtnl.request(rtnl.new_address(index, want, ADDRESS_PROTO, flags))
        for cidr in ("10.0.0.5/30", "2001:db8:1::1/64"):
            want = ipaddress.ip_interface(cidr)
            ipr.ipr.addr(
                "add",
                index=theirs.index,
                address=str(want.ip),
                prefixlen=want.network.prefixlen,
                proto=ADDRESS_PROTO,
                flags=iface.IFA_F_NODAD if want.version == 6 else 0,
            )

        def shape(index: int) -> list[tuple[int, int, int, list[str], int]]:
            """The addresses meshwire added, as pyroute2 reads them."""
            return sorted(
                (
                    m["family"],
                    m["prefixlen"],
                    m["flags"],
                    sorted(n for n, _ in m["attrs"]),
                    m.get_attr("IFA_PROTO") or 0,
                )
                for m in ipr.ipr.get_addr(index=index)
                if m.get_attr("IFA_PROTO") == ADDRESS_PROTO
            )

        assert shape(ours.index) == shape(theirs.index)
        assert len(shape(ours.index)) == 2
        a, b = iface.find(ipr, "eth1"), iface.find(ipr, "eth2")
        assert a is not None and b is not None
        assert (a.mark, a.mtu, a.up) == (b.mark, b.mtu, b.up) == (a.mark, 1400, True)
        assert a.mark is not None and a.mark.format() == "meshwire:default/1"


@needs_root
@pytest.mark.root
def test_a_vxlan_made_by_hand_reads_back_as_one_pyroute2_made(namespaces: Namespaces) -> None:
    host, pod = namespaces.add("host"), namespaces.add("pod")
    with open_netns(host) as hns, open_netns(pod) as ns, netlink(hns) as hipr, netlink(ns) as ipr:
        remote = ipaddress.ip_address("169.254.0.12")
        hipr.rtnl.request(rtnl.new_vxlan("vx0", ns.fd, 5001, remote, 4790, 1400))
        hipr.ipr.link(
            "add",
            ifname="vx1",
            kind="vxlan",
            net_ns_fd=ns.fd,
            vxlan_id=5002,
            vxlan_group=str(remote),
            vxlan_port=4790,
            mtu=1400,
        )
        ours, theirs = iface.find(ipr, "vx0"), iface.find(ipr, "vx1")
        assert ours is not None and theirs is not None
        assert ours.info.pop("IFLA_VXLAN_ID") == 5001
        assert theirs.info.pop("IFLA_VXLAN_ID") == 5002
        assert ours.info == theirs.info
        assert (ours.kind, ours.mtu, ours.link_netnsid is not None) == ("vxlan", 1400, True)
        # Its UDP socket is the host's: the same VNI and port again is refused there.
        with pytest.raises(NetlinkError) as held:
            hipr.rtnl.request(rtnl.new_vxlan("vx2", ns.fd, 5001, remote, 4790))
        assert held.value.code == errno.EEXIST


@needs_root
@pytest.mark.root
def test_addresses_and_netns_ids_read_back_as_pyroute2_reads_them(
    namespaces: Namespaces,
) -> None:
    pod, peer = namespaces.add("a"), namespaces.add("b")
    with open_netns(pod) as ns, open_netns(peer) as pns, netlink(ns) as ipr:
        assert iface.nsid_of(ipr, pns) is None  # no id given before anything needs one
        ipr.rtnl.request(rtnl.new_veth("v0", "v1", pns.fd))
        ipr.rtnl.request(rtnl.new_veth("w0", "w1", pns.fd))
        v0, w0 = iface.find(ipr, "v0"), iface.find(ipr, "w0")
        assert v0 is not None and w0 is not None and v0.link_netnsid is not None
        assert iface.nsid_of(ipr, pns) == v0.link_netnsid
        assert ipr.ipr.get_netnsid(fd=pns.fd)["nsid"] == v0.link_netnsid
        for cidr in ("10.0.0.1/30", "2001:db8::1/64", "10.9.0.1/24"):
            want = ipaddress.ip_interface(cidr)
            ipr.rtnl.request(rtnl.new_address(v0.index, want, ADDRESS_PROTO))
        ip("-n", netns_name(pod), "address", "add", "10.7.0.1/24", "dev", "w0")
        ours = iface.addresses(ipr, v0.index)
        theirs = [m for m in ipr.ipr.addr("dump") if m["index"] == v0.index]
        assert len(ours) == len(theirs) >= 3  # and the IPv6 link-local, once up
        assert {(a.interface, a.proto) for a in ours} == {
            (
                ipaddress.ip_interface(
                    f"{m.get_attr('IFA_LOCAL') or m.get_attr('IFA_ADDRESS')}/{m['prefixlen']}"
                ),
                m.get_attr("IFA_PROTO"),
            )
            for m in theirs
        }
        assert all(a.index == v0.index for a in ours)
        assert [str(a.interface) for a in iface.addresses(ipr, w0.index)] == ["10.7.0.1/24"]
