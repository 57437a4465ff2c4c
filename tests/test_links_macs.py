"""Link ends are made with their row's MAC, and a new end announces its address.

The frames are checked as bytes; the announcement's effect is checked in real
network namespaces: a peer whose neighbour entry names an old MAC, in state
REACHABLE, follows the announcement at once.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import struct
import time

import pytest
from links_helpers import Namespaces, ip, links, namespaces, needs_root, veth_row

from meshwire.control.links.announce import Announcer, _checksum, announce, frames
from meshwire.control.links.driver import Drivers, kernel_drivers
from meshwire.control.links.driver_errors import SpecError
from meshwire.control.links.netns import open_netns
from meshwire.control.tables.links import End

__all__ = ["namespaces"]

MAC = "02:11:22:33:44:55"
OLD = "02:de:ad:00:00:01"


def test_a_v4_address_is_announced_by_a_gratuitous_arp_request() -> None:
    (frame,) = frames(MAC, "10.0.0.2/30")
    src = bytes.fromhex(MAC.replace(":", ""))
    assert frame[:12] == b"\xff" * 6 + src
    assert struct.unpack("!HHHBBH", frame[12:22]) == (0x0806, 1, 0x0800, 6, 4, 1)
    sender_ip, target_ip = frame[28:32], frame[38:42]
    assert frame[22:28] == src
    assert sender_ip == target_ip == ipaddress.IPv4Address("10.0.0.2").packed


def test_a_v6_address_is_announced_by_an_unsolicited_overriding_advertisement() -> None:
    (frame,) = frames(MAC, "2001:db8::2/64")
    address = ipaddress.IPv6Address("2001:db8::2").packed
    assert frame[:6] == bytes.fromhex("333300000001") and frame[12:14] == b"\x86\xdd"
    ipv6, icmp = frame[14:54], frame[54:]
    assert ipv6[6:8] == bytes([58, 255]) and ipv6[8:24] == address
    assert ipv6[24:40] == ipaddress.IPv6Address("ff02::1").packed
    assert icmp[0] == 136 and icmp[4] == 0x20  # override, neither router nor solicited
    assert icmp[8:24] == address
    assert icmp[24:26] == b"\x02\x01" and icmp[26:32] == bytes.fromhex(MAC.replace(":", ""))
    pseudo = address + ipv6[24:40] + struct.pack("!I3xB", len(icmp), 58)
    assert _checksum(pseudo + icmp) == 0


def test_an_end_without_address_or_mac_announces_nothing() -> None:
    assert frames(MAC, "") == [] and frames("", "10.0.0.1/24") == []


def neighbour(netns: str, address: str) -> dict[str, str]:
    out = json.loads(ip("-n", os.path.basename(netns), "-j", "neigh", "show", address))
    return out[0] if out else {}


@needs_root
@pytest.mark.root
@pytest.mark.parametrize(("a_ip", "b_ip"), [("10.0.0.1/30", "10.0.0.2/30"),
                                            ("2001:db8::1/64", "2001:db8::2/64")])  # fmt: skip
def test_a_peer_whose_reachable_entry_names_an_old_mac_follows_the_announcement(
    namespaces: Namespaces, a_ip: str, b_ip: str
) -> None:
    a, b = namespaces.add("a"), namespaces.add("b")
    row = veth_row(a, b, a_ip=a_ip, b_ip=b_ip)
    row = dataclasses.replace(row, peer=dataclasses.replace(row.peer, mac=MAC))
    announcer = Announcer()
    Drivers(kernel_drivers(host_netns=namespaces.add("host"), announcer=announcer)).update(row)
    # The build's own announcement, sent from the announcer's thread, must not land
    # on the stale entry this test makes next.
    assert announcer.flush(timeout=30)
    b_address = b_ip.split("/")[0]
    ip("-n", os.path.basename(a), "neigh", "replace", b_address, "lladdr", OLD,
       "dev", "eth1", "nud", "reachable")  # fmt: skip
    assert neighbour(a, b_address)["lladdr"] == OLD

    with open_netns(b) as ns:
        announce(ns, End("r2", b, "eth1", b_ip, MAC))

    # The frame crosses the veth and is processed by the receiving kernel on its own
    # time: a bounded wait, not a timing assertion.
    deadline = time.monotonic() + 10
    while (entry := neighbour(a, b_address)).get("lladdr") != MAC and time.monotonic() < deadline:
        time.sleep(0.05)
    assert entry["lladdr"] == MAC, entry


@needs_root
@pytest.mark.root
def test_a_veth_pair_is_made_with_its_rows_macs_and_made_again_with_the_same(
    namespaces: Namespaces,
) -> None:
    a, b = namespaces.add("a"), namespaces.add("b")
    row = veth_row(a, b, a_ip="10.0.0.1/30", b_ip="10.0.0.2/30")
    row = dataclasses.replace(
        row,
        local=dataclasses.replace(row.local, mac="02:00:00:00:00:0a"),
        peer=dataclasses.replace(row.peer, mac="06:00:00:00:00:0b"),
    )
    driver = Drivers(kernel_drivers(host_netns=namespaces.add("host")))
    driver.update(row)
    assert (links(a)["eth1"]["address"], links(b)["eth1"]["address"]) == (
        "02:00:00:00:00:0a",
        "06:00:00:00:00:0b",
    )

    namespaces.recreate(b)  # the peer pod restarts
    driver.update(row)
    assert (links(a)["eth1"]["address"], links(b)["eth1"]["address"]) == (
        "02:00:00:00:00:0a",
        "06:00:00:00:00:0b",
    )


def test_an_end_whose_mac_no_interface_may_have_is_a_spec_error_before_any_change() -> None:
    # A veth row builds the peer pod's end too, whose local_mac only the peer's
    # own object validated.
    row = veth_row("/run/netns/none-a", "/run/netns/none-b")
    row = dataclasses.replace(row, peer=dataclasses.replace(row.peer, mac="01:00:5e:00:00:01"))
    with pytest.raises(SpecError, match="mac: '01:00:5e:00:00:01' is a multicast address"):
        Drivers(kernel_drivers()).update(row)


@needs_root
@pytest.mark.root
def test_announcements_queued_on_an_announcer_go_out_and_a_gone_netns_is_skipped(
    namespaces: Namespaces,
) -> None:
    a, b = namespaces.add("a"), namespaces.add("b")
    # No address on b's end for the driver: it queues no announcement of its own.
    row = veth_row(a, b, a_ip="10.0.0.1/30", b_ip="")
    row = dataclasses.replace(row, peer=dataclasses.replace(row.peer, mac=MAC))
    Drivers(kernel_drivers(host_netns=namespaces.add("host"))).update(row)
    ip("-n", os.path.basename(b), "address", "add", "10.0.0.2/30", "dev", "eth1")
    ip("-n", os.path.basename(a), "neigh", "replace", "10.0.0.2", "lladdr", OLD,
       "dev", "eth1", "nud", "reachable")  # fmt: skip
    assert neighbour(a, "10.0.0.2")["lladdr"] == OLD

    announcer = Announcer()
    announcer.later(End("r9", "/var/run/netns/mwt-gone-for-good", "eth1", "10.9.9.9/30", MAC))
    announcer.later(End("r2", b, "eth1", "10.0.0.2/30", MAC))
    deadline = time.monotonic() + 30
    while neighbour(a, "10.0.0.2").get("lladdr") != MAC:
        assert time.monotonic() < deadline, neighbour(a, "10.0.0.2")
        time.sleep(0.01)
