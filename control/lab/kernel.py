"""Link ends as the kernel sees them: does the interface exist, is it up, its MTU, MAC and counters.

Read fresh on every call (realised state is never cached). A missing
namespace or interface is a normal answer (`exists=False`), not an error.
`read_ends` reads many ends with one link dump per namespace, in parallel:
what `check`, `status` and `up`'s wait use, so a pod with 1,500 links costs
one dump, not 1,500 netlink sessions.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pyroute2 import IPRoute

from meshwire.control.lab import netns


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
IFF_UP = 0x1
# Namespaces read at once by `read_ends`: each read is one thread in the kernel's netlink dump.
PARALLEL = 8


def _state(link: Any) -> EndState:
    stats = link.get_attr("IFLA_STATS64") or {}
    admin_up = bool(link["flags"] & IFF_UP)
    # The carrier itself, not the operstate the kernel derives from it: that one
    # follows a carrier change only up to a second later (its link watch).
    up = admin_up and link.get_attr("IFLA_CARRIER") == 1
    return EndState(
        exists=True,
        admin_up=admin_up,
        up=up,
        rx_packets=int(stats.get("rx_packets", 0)),
        tx_packets=int(stats.get("tx_packets", 0)),
        rx_dropped=int(stats.get("rx_dropped", 0)),
        tx_dropped=int(stats.get("tx_dropped", 0)),
        mtu=int(link.get_attr("IFLA_MTU") or 0),
        mac=link.get_attr("IFLA_ADDRESS") or "",
    )


def netns_ends(ns: str) -> dict[str, EndState]:
    """Every interface of namespace `ns` (name or path) by name; {} for a missing namespace,
    and for one being deleted meanwhile (`ip netns del` unmounts its file before it
    removes it: setns then says EINVAL)."""
    if not netns.exists(ns) and not ns.startswith("/"):
        return {}

    def read() -> dict[str, EndState]:
        with IPRoute() as ipr:
            return {link.get_attr("IFLA_IFNAME"): _state(link) for link in ipr.get_links()}

    try:
        return netns.in_netns(ns, read)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return {}
        raise


class Ends:
    """The state of many (netns, interface) ends, read with one dump per namespace."""

    def __init__(self, namespaces: Iterable[str]) -> None:
        wanted = list(dict.fromkeys(namespaces))
        with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
            self._by_ns = dict(zip(wanted, pool.map(netns_ends, wanted), strict=True))

    def get(self, ns: str, intf: str) -> EndState:
        """An end of a namespace given at construction (others read as missing)."""
        return self._by_ns.get(ns, {}).get(intf, MISSING)
