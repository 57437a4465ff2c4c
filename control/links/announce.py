"""Announcing a link end's address: gratuitous ARP, unsolicited neighbour advertisement.

A peer whose neighbour entry names an old MAC (a pod's interface made again
with another one, e.g. the first time after an upgrade to stable MACs) would
send into the void until the entry ages out, up to about a minute. The frame
sent from the new interface updates the entry at once: an ARP request whose
sender and target are the end's address (the kernel accepts it over an
existing entry, `arp_process`'s `is_garp`), or a neighbour advertisement to
all nodes with the override flag and the target's link-layer address
(RFC 4861 §7.2.6). Both leave the entry STALE with the new MAC, so the next
packet goes to it.

`frames` is pure. `announce` sends them from a packet socket opened inside
the pod's netns (`netns.socket_in`); it is best effort: a failure is logged,
never a link error, since the link itself is right. An end whose far side
outlives it is announced: the vxlan and macvlan drivers queue their new ends'
announcements on an `Announcer`, which sends them off their path, and the
wire manager announces a grpc wire's new TAP. A veth pair is always new on
both sides and announces nothing.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import queue
import socket
import struct
import threading

from ..tables.links import End
from .netns import Netns, NetnsGone, NotANetns, open_netns, socket_in

log = logging.getLogger(__name__)

ETH_P_ARP = 0x0806
ETH_P_IPV6 = 0x86DD
BROADCAST = b"\xff" * 6
ALL_NODES = ipaddress.IPv6Address("ff02::1")
ALL_NODES_MAC = b"\x33\x33\x00\x00\x00\x01"
ICMPV6 = 58
NEIGHBOR_ADVERT = 136
NA_OVERRIDE = 0x20000000
OPT_TARGET_LLADDR = 2


def mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", ""))


def frames(mac: str, cidr: str) -> list[bytes]:
    """The Ethernet frames announcing `cidr`'s address at `mac` (none without both)."""
    if not cidr or not mac:
        return []
    address = ipaddress.ip_interface(cidr).ip
    src = mac_bytes(mac)
    if isinstance(address, ipaddress.IPv4Address):
        ip = address.packed
        arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + src + ip + b"\x00" * 6 + ip
        return [BROADCAST + src + struct.pack("!H", ETH_P_ARP) + arp]
    icmp = struct.pack("!BBHI", NEIGHBOR_ADVERT, 0, 0, NA_OVERRIDE) + address.packed
    icmp += struct.pack("!BB", OPT_TARGET_LLADDR, 1) + src
    pseudo = address.packed + ALL_NODES.packed + struct.pack("!I3xB", len(icmp), ICMPV6)
    checksum = _checksum(pseudo + icmp)
    icmp = icmp[:2] + struct.pack("!H", checksum) + icmp[4:]
    ipv6 = struct.pack("!IHBB", 6 << 28, len(icmp), ICMPV6, 255)
    ipv6 += address.packed + ALL_NODES.packed
    return [ALL_NODES_MAC + src + struct.pack("!H", ETH_P_IPV6) + ipv6 + icmp]


def announce(ns: Netns, *ends: End) -> None:
    """Send each end's announcement from its interface in `ns` (best effort, see module
    doc), all through one packet socket.

    The MAC announced is the one the interface has, read from the kernel, not
    the row's: the announcement never claims an address the interface lacks.
    """
    ends = tuple(end for end in ends if end.ip)
    if not ends:
        return
    try:
        sock = socket_in(ns, socket.AF_PACKET, socket.SOCK_RAW)
    except OSError as exc:
        log.warning("announce in %s: %s", ns.path, exc)
        return
    with sock:
        for end in ends:
            try:
                # Rebinding a socket of protocol 0 is cheap: it has no hook to move.
                sock.bind((end.intf, 0))
                mac = ":".join(f"{byte:02x}" for byte in sock.getsockname()[4])
                for frame in frames(mac, end.ip):
                    sock.send(frame)
            except OSError as exc:
                # Gone meanwhile (made again, or its pod deleted): nothing to announce.
                level = logging.DEBUG if exc.errno == errno.ENODEV else logging.WARNING
                log.log(level, "announce %s in %s: %s", end.intf, ns.path, exc)


def announce_at(*ends: End) -> None:
    """`announce` the ends, all in the netns of the first, opened by path; a netns
    gone meanwhile is no announcement."""
    if not ends:
        return
    try:
        with open_netns(ends[0].netns) as ns:
            announce(ns, *ends)
    except (NetnsGone, NotANetns) as exc:
        log.debug("announce %s: %s", ", ".join(end.intf for end in ends), exc)


class Announcer:
    """Announces ends from a thread of its own, in batches: one packet socket per netns
    and batch.

    A packet socket costs an RCU grace period when it is closed (the kernel's
    packet_release calls synchronize_net), more than the rest of a veth's
    build, so no driver call opens one: the ends of a pod pair with many
    links would queue behind those closes. Queued here, a link is realised without waiting for its
    announcement, which follows within a batch, and a burst of ends in one
    netns shares one socket. Each batch is sent in the order queued, a netns
    gone meanwhile skipped. The thread starts with the first end queued and
    lives as long as the process (a daemon thread: exiting drops what is queued).
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[End] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        # Ends queued and not yet sent (or skipped); flush() waits for none.
        self._pending = 0
        self._sent = threading.Condition(self._lock)

    def later(self, end: End) -> None:
        """Queue `end`'s announcement (none for an end without an address)."""
        if not end.ip:
            return
        with self._lock:
            self._pending += 1
            self._queue.put(end)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="meshwire-announce", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            with contextlib.suppress(queue.Empty):
                while True:
                    batch.append(self._queue.get_nowait())
            by_netns: dict[str, list[End]] = {}
            for end in batch:
                by_netns.setdefault(end.netns, []).append(end)
            for ends in by_netns.values():
                announce_at(*ends)
            with self._sent:
                self._pending -= len(batch)
                self._sent.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until every end queued so far was announced; False if `timeout` s passed."""
        with self._sent:
            return self._sent.wait_for(lambda: self._pending == 0, timeout)


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\x00"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF
