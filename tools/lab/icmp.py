"""An ICMPv6 echo sent from inside a namespace through one interface, answered or not.

How `lab check` proves a link with IPv6 addresses (IPv4 ones answer ARP,
`arp.py`): an echo request leaves the `a` end's interface (SO_BINDTODEVICE)
for the `b` end's address and must be answered, as `ping -I <intf>` would,
but from a raw socket made inside the namespace by this process: no
subprocess per link. The request carries a random identifier and nonce, so
only the answer to this check counts; it is re-sent every RESEND seconds
until answered or the timeout passes (the first one may wait for neighbour
discovery). The kernel fills in the ICMPv6 checksum.
"""

from __future__ import annotations

import ipaddress
import secrets
import socket
import struct
import time

from meshwire.tools.lab.netns import socket_in

RESEND = 0.2
ECHO_REQUEST = 128
ECHO_REPLY = 129


def echo_request(ident: int, seq: int, payload: bytes) -> bytes:
    return struct.pack("!BBHHH", ECHO_REQUEST, 0, 0, ident, seq) + payload


def is_reply(packet: bytes, ident: int, payload: bytes) -> bool:
    """Whether `packet` (an ICMPv6 message, as a raw socket reads it) answers our request."""
    if len(packet) < 8:
        return False
    kind, _, _, got_ident, _ = struct.unpack("!BBHHH", packet[:8])
    return kind == ECHO_REPLY and got_ident == ident and packet[8:] == payload


def answers(ns: str, intf: str, address: str, timeout: float) -> bool:
    """Whether IPv6 `address` answers an echo sent through `intf` in `ns` within `timeout` s.

    ValueError for an address that is not IPv6. Raises OSError when the socket
    cannot be made or bound (namespace gone, interface missing) or the request
    cannot be sent (interface down, no route).
    """
    if ipaddress.ip_address(address).version != 6:
        raise ValueError(f"ICMPv6 echo needs an IPv6 address, not {address}")
    ident, payload = secrets.randbits(16), b"meshwire-lab-check" + secrets.token_bytes(16)
    with socket_in(ns, socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, intf.encode())
        deadline = time.monotonic() + timeout
        seq = 0
        while time.monotonic() < deadline:
            seq += 1
            sock.sendto(echo_request(ident, seq, payload), (address, 0))
            resend_at = min(time.monotonic() + RESEND, deadline)
            while (left := resend_at - time.monotonic()) > 0:
                sock.settimeout(left)
                try:
                    packet = sock.recv(65536)
                except TimeoutError:
                    break
                if is_reply(packet, ident, payload):
                    return True
    return False
