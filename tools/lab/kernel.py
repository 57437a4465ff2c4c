"""Link ends as the kernel sees them: does the interface exist, is it up, its MTU, MAC and counters.

Read fresh on every call (realised state is never cached). A missing
namespace or interface is a normal answer (`exists=False`), not an error.
`Ends` reads many ends with one link dump per namespace, in parallel:
what `check`, `status` and `up`'s wait use, so a pod with 1,500 links costs
one dump, not 1,500 netlink sessions.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from meshwire.control.links import rtnl
from meshwire.control.links.netns import NetnsGone, NotANetns, rtnl_at
from meshwire.tools.lab.lab_names import resolve


@dataclass(frozen=True, slots=True)
class EndState:
    exists: bool
    admin_up: bool = False  # IFF_UP: someone set it up
    up: bool = False  # admin up and with carrier
    rx_packets: int = 0
    tx_packets: int = 0
    rx_dropped: int = 0
    tx_dropped: int = 0
    mtu: int = 0
    mac: str = ""


MISSING = EndState(exists=False)
# rx_packets, tx_packets, then (after four u64) rx_dropped, tx_dropped of rtnl_link_stats64.
STATS64 = struct.Struct("=QQ32xQQ")
# Namespaces read at once by `Ends`: each read is one thread in the kernel's netlink dump.
PARALLEL = 8


def _state(body: bytes) -> tuple[str, EndState]:
    """An RTM_NEWLINK body as (name, state)."""
    _, _, _, flags, _ = rtnl.IFINFOMSG.unpack_from(body)
    name, carrier, mtu, mac, stats = "", False, 0, "", b""
    for key, payload in rtnl.attrs(body[rtnl.IFINFOMSG.size :]):
        if key == rtnl.IFLA_IFNAME:
            name = payload.rstrip(b"\0").decode()
        elif key == rtnl.IFLA_CARRIER:
            carrier = payload[:1] == b"\1"
        elif key == rtnl.IFLA_MTU:
            (mtu,) = struct.unpack_from("=I", payload)
        elif key == rtnl.IFLA_ADDRESS:
            mac = payload.hex(":")
        elif key == rtnl.IFLA_STATS64:
            stats = payload
    rx, tx, rx_dropped, tx_dropped = (
        STATS64.unpack_from(stats) if len(stats) >= STATS64.size else (0, 0, 0, 0)
    )
    admin_up = bool(flags & rtnl.IFF_UP)
    # The carrier itself, not the operstate the kernel derives from it: that one
    # follows a carrier change only up to a second later (its link watch).
    return name, EndState(
        exists=True,
        admin_up=admin_up,
        up=admin_up and carrier,
        rx_packets=rx,
        tx_packets=tx,
        rx_dropped=rx_dropped,
        tx_dropped=tx_dropped,
        mtu=mtu,
        mac=mac,
    )


def netns_ends(ns: str) -> dict[str, EndState]:
    """Every interface of namespace `ns` (name or path) by name; {} for a missing namespace,
    and for one being deleted meanwhile (`ip netns del` unmounts its file before it
    removes it: the path is then no namespace).

    One raw link dump, decoded for these fields only: a lab of 1,000 pods is read
    in a poll, which pyroute2's decoding of every attribute made take seconds.
    """
    try:
        with rtnl_at(resolve(ns)) as sock:
            replies = sock.request(rtnl.dump_links())
    except (NetnsGone, NotANetns):
        return {}
    return dict(_state(body) for _, body in replies)


class Ends:
    """The state of many (netns, interface) ends, read with one dump per namespace."""

    def __init__(self, namespaces: Iterable[str]) -> None:
        wanted = list(dict.fromkeys(namespaces))
        with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
            self._by_ns = dict(zip(wanted, pool.map(netns_ends, wanted), strict=True))

    def get(self, ns: str, intf: str) -> EndState:
        """An end of a namespace given at construction (others read as missing)."""
        return self._by_ns.get(ns, {}).get(intf, MISSING)
