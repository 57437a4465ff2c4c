"""A raw Ethernet frame sent on one link end and looked for on the other.

How `lab check` proves a link without addresses carries traffic. The frame is
broadcast, of the local experimental EtherType 0x88B5, and carries a random
nonce, so only the frame this check sent counts. It is re-sent every
RESEND seconds until seen or the timeout passes (a gRPC wire may drop the
first frames while its stream comes up).
"""

from __future__ import annotations

import secrets
import socket
import struct
import time

from meshwire.tools.lab.netns import socket_in

ETH_P_LAB = 0x88B5
ETH_P_ALL = 0x0003
MIN_FRAME = 60
MAGIC = b"meshwire-lab-check"
RESEND = 0.2


def build_frame(src_mac: bytes, nonce: bytes) -> bytes:
    frame = b"\xff" * 6 + src_mac + struct.pack("!H", ETH_P_LAB) + MAGIC + nonce
    return frame.ljust(MIN_FRAME, b"\0")


def frame_passes(
    src_ns: str,
    src_intf: str,
    dst_ns: str,
    dst_intf: str,
    timeout: float,
    rx_all: bool = False,
) -> bool:
    """Whether a frame sent on src_ns/src_intf arrives on dst_ns/dst_intf within `timeout` s.

    `rx_all` listens for every protocol (ETH_P_ALL) on the receiving end: needed
    where a frame is consumed before protocol handlers see it, as on a bridge port.
    Raises OSError when an end cannot be opened (interface missing, namespace gone)
    or the frame cannot be sent (interface down: ENETDOWN).
    """
    proto = socket.htons(ETH_P_LAB)
    listen = ETH_P_ALL if rx_all else ETH_P_LAB
    with (
        socket_in(dst_ns, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(listen)) as rx,
        socket_in(src_ns, socket.AF_PACKET, socket.SOCK_RAW, proto) as tx,
    ):
        rx.bind((dst_intf, listen))
        tx.bind((src_intf, ETH_P_LAB))
        nonce = secrets.token_bytes(16)
        frame = build_frame(tx.getsockname()[4], nonce)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            tx.send(frame)
            resend_at = min(time.monotonic() + RESEND, deadline)
            while (left := resend_at - time.monotonic()) > 0:
                rx.settimeout(left)
                try:
                    data = rx.recv(65536)
                except TimeoutError:
                    break
                if MAGIC + nonce in data:
                    return True
    return False
