"""Keeping the daemon's listen ports out of the node's ephemeral range (config `reserve_ports`).

The ports the daemon listens on (51100, 51111, 51112 and up by default) lie in
Linux's default ephemeral range (32768-60999): any outgoing connection on the
node may draw one as its source port and hold it, with its TIME_WAIT, when the
daemon (re)starts. Ports listed in `net.ipv4.ip_local_reserved_ports` are never
drawn, so the daemon adds its own there before it binds them.

The sysctl is per network namespace (the daemon's: the host's, for a
hostNetwork pod) and other software may own entries in it: the daemon only
adds ports that are missing and never removes one, also not at exit (a
restarted daemon needs them again). Reserving a port does not free it from a
connection that holds it already: `listening.py` waits for that.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from meshwire.base import hostport
from meshwire.control.common.config import Config

log = logging.getLogger(__name__)

SYSCTL = Path("/proc/sys/net/ipv4/ip_local_reserved_ports")


def listen_ports(config: Config) -> list[int]:
    """The TCP ports this daemon will listen on: `metrics.listen`, and for the gRPC
    wire (every node runs it: emulated links use it whatever the inter-node kind)
    `peer.listen` and each worker's `dataplane.port_base + k`. Port 0 (any free
    port, as tests ask) is no port to reserve."""
    base = config.dataplane.port_base
    ports = {
        hostport.split(config.metrics.listen)[1],
        hostport.split(config.peer.listen)[1],
        *range(base, base + config.worker_count),
    }
    return sorted(ports - {0})


def parse(text: str) -> list[tuple[int, int]]:
    """The sysctl's value ("1000,2000-2005", empty for none) as (first, last) ranges.

    Raises ValueError for text that is not such a list."""
    ranges = []
    for item in text.strip().split(","):
        if not item:
            continue
        first, _, last = item.partition("-")
        ranges.append((int(first), int(last or first)))
    return ranges


def render(ports: Iterable[int]) -> str:
    """Ports as the sysctl takes them, consecutive ones as ranges: "51100,51111-51113"."""
    parts: list[str] = []
    run: list[int] = []
    for port in sorted(set(ports)):
        if run and port != run[-1] + 1:
            parts.append(_span(run))
            run = []
        run.append(port)
    if run:
        parts.append(_span(run))
    return ",".join(parts)


def _span(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


def missing(current: str, ports: Iterable[int]) -> list[int]:
    """Those of `ports` that the sysctl's value `current` does not reserve yet."""
    reserved = parse(current)
    return sorted(p for p in set(ports) if not any(a <= p <= b for a, b in reserved))


def reserve(ports: list[int], sysctl: Path = SYSCTL) -> list[int]:
    """Add `ports` to the sysctl, keeping every entry it has; returns the ports added.

    The kernel reads a write as the whole new list, so the current one is
    written back as it was, with ours after it. A sysctl that cannot be read or
    written (no privilege, a read-only /proc) is logged and skipped: the daemon
    then relies on waiting for a taken port."""
    try:
        current = sysctl.read_text().strip()
        added = missing(current, ports)
        if added:
            sysctl.write_text(",".join(filter(None, [current, render(added)])))
    except (OSError, ValueError) as exc:
        log.warning("reserve_ports: cannot reserve ports %s in %s: %s", render(ports), sysctl, exc)
        return []
    if added:
        log.info("reserve_ports: reserved %s in %s", render(added), sysctl)
    return added
