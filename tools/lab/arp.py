"""An ARP request sent through one interface inside a namespace, answered or not.

How `lab check` proves a link with IPv4 addresses: from each end it asks
who-has for the other end's address, as `arping -I <intf>` would, from a
packet socket made inside the namespace by this process, and the other end's
kernel must answer. Both ways, that proves frames pass each way and both
addresses are configured where the topology says.

Why not ping: the ARP (neighbour) table is one table for every namespace of
the machine, capped at net.ipv4.neigh.default.gc_thresh3 (1024 by default),
and an echo leaves two entries that stay pinned for ~30 s (REACHABLE), so
pinging 1,500 links in a few seconds overflows it and most echoes are dropped
although their links work. An answered request leaves one entry, on the
answering side, in a state the kernel reclaims after 5 s.

The request is re-sent every RESEND seconds until answered or the timeout passes.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import time

from meshwire.tools.lab.netns import socket_in

ETH_P_ARP = 0x0806
ETH_P_IP = 0x0800
REQUEST, REPLY = 1, 2
BROADCAST = b"\xff" * 6
RESEND = 0.2


def request_frame(mac: bytes, sender: str, target: str) -> bytes:
    """A broadcast who-has `target` tell `sender` (at `mac`)."""
    arp = struct.pack("!HHBBH", 1, ETH_P_IP, 6, 4, REQUEST)
    arp += mac + socket.inet_aton(sender) + b"\0" * 6 + socket.inet_aton(target)
    return BROADCAST + mac + struct.pack("!H", ETH_P_ARP) + arp


def is_answer(frame: bytes, mac: bytes, sender: str, target: str) -> bool:
    """Whether `frame` is `target`'s reply to our request from `sender` at `mac`."""
    arp = frame[14:42]
    if len(arp) < 28 or struct.unpack("!H", frame[12:14])[0] != ETH_P_ARP:
        return False
    op = struct.unpack("!H", arp[6:8])[0]
    return (
        op == REPLY
        and arp[14:18] == socket.inet_aton(target)
        and arp[18:24] == mac
        and arp[24:28] == socket.inet_aton(sender)
    )


def answers(ns: str, intf: str, sender: str, target: str, timeout: float) -> bool:
    """Whether `target` answers who-has sent on `intf` in `ns` as `sender` within `timeout` s.

    Both are IPv4 addresses (ValueError otherwise). Raises OSError when the
    socket cannot be made or bound (namespace gone, interface missing) or the
    request cannot be sent (interface down).
    """
    for address in (sender, target):
        if ipaddress.ip_address(address).version != 4:
            raise ValueError(f"ARP needs IPv4 addresses, not {address}")
    with socket_in(ns, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ARP)) as sock:
        sock.bind((intf, ETH_P_ARP))
        mac = sock.getsockname()[4]
        frame = request_frame(mac, sender, target)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sock.send(frame)
            resend_at = min(time.monotonic() + RESEND, deadline)
            while (left := resend_at - time.monotonic()) > 0:
                sock.settimeout(left)
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    break
                if is_answer(data, mac, sender, target):
                    return True
    return False
