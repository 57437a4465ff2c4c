"""Link ends as the kernel sees them: does the interface exist, is it up, its frame counters.

Read fresh on every call (realised state is never cached). A missing
namespace or interface is a normal answer (`exists=False`), not an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyroute2 import IPRoute

from meshwire.control.lab import netns


@dataclass(frozen=True, slots=True)
class EndState:
    exists: bool
    admin_up: bool = False  # IFF_UP: someone set it up
    up: bool = False  # admin up and the kernel reports it operational (carrier)
    rx_packets: int = 0
    tx_packets: int = 0
    rx_dropped: int = 0
    tx_dropped: int = 0


MISSING = EndState(exists=False)
IFF_UP = 0x1


def end_state(ns: str, intf: str) -> EndState:
    """The interface `intf` in namespace `ns` (name or path)."""
    if not netns.exists(ns) and not ns.startswith("/"):
        return MISSING

    def read() -> EndState:
        with IPRoute() as ipr:
            found = ipr.link_lookup(ifname=intf)
            if not found:
                return MISSING
            link = ipr.get_links(found[0])[0]
            stats = link.get_attr("IFLA_STATS64") or {}
            admin_up = bool(link["flags"] & IFF_UP)
            # operstate UNKNOWN is what a TAP or a dummy without carrier logic reports.
            up = admin_up and link.get_attr("IFLA_OPERSTATE") in ("UP", "UNKNOWN")
            return EndState(
                exists=True,
                admin_up=admin_up,
                up=up,
                rx_packets=int(stats.get("rx_packets", 0)),
                tx_packets=int(stats.get("tx_packets", 0)),
                rx_dropped=int(stats.get("rx_dropped", 0)),
                tx_dropped=int(stats.get("tx_dropped", 0)),
            )

    try:
        return netns.in_netns(ns, read)
    except FileNotFoundError:
        return MISSING
