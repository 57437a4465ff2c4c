"""The kernel's own floor for veth links: what `ip -batch` takes for the same work.

    .venv/bin/python bench/kernel_floor.py [--pairs 1500]

`measure(pairs, prefix)` makes two fresh network namespaces (`<prefix>a`,
`<prefix>b`) and, timed, `pairs` veth pairs between them, each end addressed
(a /30 of its own) and up, with two `ip -batch` runs (one netlink socket each):
the first, in `a`, creates every pair with its peer end straight in `b`,
addresses and raises the `a` ends; the second addresses and raises the `b`
ends. It reports when both runs returned (`batch_s`) and when every end was
up with carrier in the kernel (`floor_s`, polled every 10 ms: the kernel
reports carrier through its linkwatch work, a little after the requests). Both
namespaces are deleted afterwards, even on failure.

This is the work meshwire does for a pod pair's links, minus the ownership
marks, MAC addresses and read-backs: the figure to hold meshwire's converge
time against (`reconcile_bench.py` reports the ratio).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from meshwire.control.links import rtnl
from meshwire.control.links.netns import rtnl_at
from meshwire.tools.lab import netns
from meshwire.tools.lab.lab_names import resolve

# Room for 2**14 pairs, each its own /30; inside the floor's own namespaces.
BASE = ipaddress.IPv4Address("10.64.0.0")
MAX_PAIRS = 1 << 14
IFF_UP = 0x1
IFLA_OPERSTATE = 16
IF_OPER_UP = 6
POLL = 0.01
TIMEOUT = 120.0


def end_names(index: int) -> tuple[str, str]:
    return f"fa{index}", f"fb{index}"


def addresses(index: int) -> tuple[str, str]:
    """The /30 addresses of pair `index`'s two ends."""
    network = int(BASE) + 4 * index
    return (
        f"{ipaddress.IPv4Address(network + 1)}/30",
        f"{ipaddress.IPv4Address(network + 2)}/30",
    )


def batches(pairs: int, peer_netns: str) -> tuple[str, str]:
    """The `ip -batch` scripts: (run in the first netns, run in `peer_netns`)."""
    if not 0 < pairs <= MAX_PAIRS:
        raise ValueError(f"kernel floor: pairs must be in 1..{MAX_PAIRS}, got {pairs}")
    first, second = [], []
    for index in range(pairs):
        a, b = end_names(index)
        address_a, address_b = addresses(index)
        first.append(f"link add {a} type veth peer name {b} netns {peer_netns}")
        first.append(f"address add {address_a} dev {a}")
        first.append(f"link set {a} up")
        second.append(f"address add {address_b} dev {b}")
        second.append(f"link set {b} up")
    return "\n".join(first) + "\n", "\n".join(second) + "\n"


def up_names(name: str) -> set[str]:
    """Interfaces of netns `name` (a name or a path) that are up with carrier (operstate
    UP; loopback's is UNKNOWN), from one raw dump: a pyroute2 dump of 3,000 interfaces
    costs a good part of a second of the CPU being measured."""
    with rtnl_at(resolve(name)) as sock:
        replies = sock.request(rtnl.dump_links())
    return {
        rtnl.parse_name(body)
        for kind, body in replies
        if kind == rtnl.RTM_NEWLINK and carrier(body)
    }


def configured_names(name: str) -> set[str]:
    """Interfaces of netns `name` (a name or a path) that are up (IFF_UP, carrier or
    not) and have an address: what `ip -batch` has made by the time it returns.
    One raw dump of the links and one of the addresses."""
    with rtnl_at(resolve(name)) as sock:
        addressed = addressed_indexes(sock)
        links = sock.request(rtnl.dump_links())
    out = set()
    for kind, body in links:
        if kind != rtnl.RTM_NEWLINK:
            continue
        _, _, index, flags, _ = rtnl.IFINFOMSG.unpack_from(body)
        if flags & IFF_UP and index in addressed:
            out.add(rtnl.parse_name(body))
    return out


def addressed_count(name: str) -> int:
    """How many interfaces of netns `name` have an address: one address dump, which
    costs the kernel and this process far less than a dump of the links (a cheap
    look before `configured_names`)."""
    with rtnl_at(resolve(name)) as sock:
        return len(addressed_indexes(sock))


def addressed_indexes(sock: rtnl.Rtnl) -> set[int]:
    """The ifindexes with an address in `sock`'s netns (one address dump)."""
    return {
        rtnl.IFADDRMSG.unpack_from(body)[4]
        for kind, body in sock.request(rtnl.get_addresses(0))
        if kind == rtnl.RTM_NEWADDR
    }


def carrier(body: bytes) -> bool:
    """Whether an RTM_NEWLINK body says up (IFF_UP) with operstate UP."""
    _, _, _, flags, _ = rtnl.IFINFOMSG.unpack_from(body)
    operstate = dict(rtnl.attrs(body[rtnl.IFINFOMSG.size :])).get(IFLA_OPERSTATE, b"")
    return bool(flags & IFF_UP) and operstate[:1] == bytes([IF_OPER_UP])


def measure(pairs: int, prefix: str) -> tuple[float, float]:
    """Seconds from the first `ip -batch` until both returned, and until all
    `2 * pairs` ends are up with carrier.

    Raises RuntimeError if they are not up within TIMEOUT, CalledProcessError if
    `ip` fails.
    """
    first_ns, peer_ns = f"{prefix}a", f"{prefix}b"
    first, second = batches(pairs, peer_ns)
    with tempfile.TemporaryDirectory(prefix="mwfloor") as tmp:
        scripts = Path(tmp)
        (scripts / "a").write_text(first)
        (scripts / "b").write_text(second)
        try:
            netns.create(first_ns)
            netns.create(peer_ns)
            started = time.monotonic()
            subprocess.run(["ip", "-n", first_ns, "-batch", str(scripts / "a")], check=True)
            subprocess.run(["ip", "-n", peer_ns, "-batch", str(scripts / "b")], check=True)
            returned = time.monotonic() - started
            deadline = started + TIMEOUT
            while len(up_names(first_ns)) < pairs or len(up_names(peer_ns)) < pairs:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"kernel floor: ends not up within {TIMEOUT:.0f}s")
                time.sleep(POLL)
            return returned, time.monotonic() - started
        finally:
            for name in (first_ns, peer_ns):
                netns.delete(name)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1500)
    args = parser.parse_args(argv)
    returned, up = measure(args.pairs, f"mwfl{secrets.token_hex(3)}-")
    print(
        json.dumps(
            {"veth_pairs": args.pairs, "batch_s": round(returned, 3), "floor_s": round(up, 3)}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
