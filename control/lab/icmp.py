"""An ICMP echo sent from inside a namespace through one interface, answered or not.

How `lab check` proves a link with addresses: an echo request leaves the `a`
end's interface (SO_BINDTODEVICE) for the `b` end's address and must be
answered, as `ping -I <intf>` would, but from a raw socket made inside the
namespace by this process: no subprocess per link, so a lab of thousands of
links is checked in seconds. The request carries a random identifier and
nonce, so only the answer to this check counts; it is re-sent every RESEND
seconds until answered or the timeout passes (the first one may wait for ARP
or neighbour discovery). IPv4 and IPv6.
"""

from __future__ import annotations

import ipaddress
import secrets
import socket
import struct
import time

from meshwire.control.lab.netns import socket_in

RESEND = 0.2
ECHO_REQUEST = {4: 8, 6: 128}
ECHO_REPLY = {4: 0, 6: 129}


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of `data`."""
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def echo_request(version: int, ident: int, seq: int, payload: bytes) -> bytes:
    """An echo request; the IPv4 checksum is filled in, the kernel fills in IPv6's."""
    header = struct.pack("!BBHHH", ECHO_REQUEST[version], 0, 0, ident, seq)
    if version == 6:
        return header + payload
    total = checksum(header + payload)
    return struct.pack("!BBHHH", ECHO_REQUEST[version], 0, total, ident, seq) + payload


def is_reply(version: int, packet: bytes, ident: int, payload: bytes) -> bool:
    """Whether `packet` (as a raw socket of `version` reads it) answers our request."""
    if version == 4:
        packet = packet[(packet[0] & 0x0F) * 4 :]  # IPv4 raw sockets read the IP header too
    if len(packet) < 8:
        return False
    kind, _, _, got_ident, _ = struct.unpack("!BBHHH", packet[:8])
    return kind == ECHO_REPLY[version] and got_ident == ident and packet[8:] == payload


def answers(ns: str, intf: str, address: str, timeout: float) -> bool:
    """Whether `address` answers an echo sent through `intf` in `ns` within `timeout` s.

    Raises OSError when the socket cannot be made or bound (namespace gone,
    interface missing) or the request cannot be sent (interface down, no route).
    """
    version = ipaddress.ip_address(address).version
    family, proto = (
        (socket.AF_INET, socket.IPPROTO_ICMP)
        if version == 4
        else (socket.AF_INET6, socket.IPPROTO_ICMPV6)
    )
    ident, payload = secrets.randbits(16), b"meshwire-lab-check" + secrets.token_bytes(16)
    with socket_in(ns, family, socket.SOCK_RAW, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, intf.encode())
        deadline = time.monotonic() + timeout
        seq = 0
        while time.monotonic() < deadline:
            seq += 1
            sock.sendto(echo_request(version, ident, seq, payload), (address, 0))
            resend_at = min(time.monotonic() + RESEND, deadline)
            while (left := resend_at - time.monotonic()) > 0:
                sock.settimeout(left)
                try:
                    packet = sock.recv(65536)
                except TimeoutError:
                    break
                if is_reply(version, packet, ident, payload):
                    return True
    return False
