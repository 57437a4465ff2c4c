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
    up: bool = False
    rx_packets: int = 0
    tx_packets: int = 0
    rx_dropped: int = 0
    tx_dropped: int = 0


MISSING = EndState(exists=False)


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
            # operstate UNKNOWN is what a TAP or a dummy without carrier logic reports.
            up = link.get_attr("IFLA_OPERSTATE") in ("UP", "UNKNOWN") and bool(link["flags"] & 1)
            return EndState(
                exists=True,
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
