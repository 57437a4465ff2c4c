"""The kernel's own floor for veth links: what `ip -batch` takes for the same work.

    .venv/bin/python bench/kernel_floor.py [--pairs 1500] [--stitched]

`measure(pairs, prefix)` makes two fresh network namespaces (`<prefix>a`,
`<prefix>b`) and, timed, `pairs` veth pairs between them, each end addressed
(a /30 of its own) and up, with two `ip -batch` runs (one netlink socket each):
the first, in `a`, creates every pair with its peer end straight in `b`,
addresses and raises the `a` ends; the second addresses and raises the `b`
ends. It reports when both runs returned (`batch_s`) and when every end was
up with carrier in the kernel (`floor_s`, polled every 10 ms: the kernel
reports carrier through its linkwatch work, a little after the requests). Both
namespaces are deleted afterwards, even on failure.

This is the work a link of one veth pair is, minus the ownership marks, MAC
addresses and read-backs.

`measure_stitched(pairs, prefix)` is the same for the links meshwire makes now
(every pod end a veth whose peer is in the node's netns, a same-node link the
two node sides stitched with tc): a third namespace (`<prefix>n`, the node)
where one `ip -batch` makes, per link, both pods' veth pairs (their ends
straight in `a` and `b`) and raises the node sides, then one `tc -batch` adds a
clsact qdisc and a u32 match-all filter with a mirred redirect on each node
side, toward the other; then the pod ends are addressed and raised as above.
Both are figures to hold meshwire's converge time against (`reconcile_bench.py`
reports the ratios).
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


def stitched_batches(pairs: int, a_netns: str, b_netns: str) -> tuple[str, str]:
    """The node's `ip -batch` and `tc -batch` scripts for `pairs` stitched links."""
    if not 0 < pairs <= MAX_PAIRS:
        raise ValueError(f"kernel floor: pairs must be in 1..{MAX_PAIRS}, got {pairs}")
    links, stitches = [], []
    for index in range(pairs):
        a, b = end_names(index)
        node_a, node_b = f"s{a}", f"s{b}"
        links.append(f"link add {node_a} type veth peer name {a} netns {a_netns}")
        links.append(f"link add {node_b} type veth peer name {b} netns {b_netns}")
        links.append(f"link set {node_a} up")
        links.append(f"link set {node_b} up")
        for here, there in ((node_a, node_b), (node_b, node_a)):
            stitches.append(f"qdisc add dev {here} clsact")
            stitches.append(
                f"filter add dev {here} ingress prio 1 protocol all u32 match u32 0 0 "
                f"action mirred egress redirect dev {there}"
            )
    return "\n".join(links) + "\n", "\n".join(stitches) + "\n"


def pod_ends(pairs: int) -> tuple[str, str]:
    """The `ip -batch` scripts that address and raise the ends in `a` and in `b`."""
    first, second = [], []
    for index in range(pairs):
        a, b = end_names(index)
        address_a, address_b = addresses(index)
        first += [f"address add {address_a} dev {a}", f"link set {a} up"]
        second += [f"address add {address_b} dev {b}", f"link set {b} up"]
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


def measure_stitched(pairs: int, prefix: str) -> tuple[float, float]:
    """As `measure`, for `pairs` links of two veth pairs stitched in a node netns."""
    a_ns, b_ns, node_ns = f"{prefix}a", f"{prefix}b", f"{prefix}n"
    links, stitches = stitched_batches(pairs, a_ns, b_ns)
    ends_a, ends_b = pod_ends(pairs)
    with tempfile.TemporaryDirectory(prefix="mwfloor") as tmp:
        scripts = Path(tmp)
        for name, text in (("links", links), ("stitches", stitches), ("a", ends_a), ("b", ends_b)):
            (scripts / name).write_text(text)
        try:
            for name in (a_ns, b_ns, node_ns):
                netns.create(name)
            started = time.monotonic()
            for tool, ns, script in (
                ("ip", node_ns, "links"), ("tc", node_ns, "stitches"),
                ("ip", a_ns, "a"), ("ip", b_ns, "b"),
            ):  # fmt: skip
                subprocess.run([tool, "-n", ns, "-batch", str(scripts / script)], check=True)
            returned = time.monotonic() - started
            deadline = started + TIMEOUT
            while len(up_names(a_ns)) < pairs or len(up_names(b_ns)) < pairs:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"kernel floor: ends not up within {TIMEOUT:.0f}s")
                time.sleep(POLL)
            return returned, time.monotonic() - started
        finally:
            for name in (a_ns, b_ns, node_ns):
                netns.delete(name)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1500)
    parser.add_argument("--stitched", action="store_true", help="links as meshwire makes them")
    args = parser.parse_args(argv)
    how = measure_stitched if args.stitched else measure
    returned, up = how(args.pairs, f"mwfl{secrets.token_hex(3)}-")
    print(
        json.dumps(
            {"veth_pairs": args.pairs, "batch_s": round(returned, 3), "floor_s": round(up, 3)}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
