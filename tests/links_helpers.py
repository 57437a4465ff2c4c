"""Real network namespaces for the link driver tests (root needed).

Every namespace a test makes is named `mwt<hex>-<label>` and removed at teardown,
even when the test fails; removing a namespace removes every interface in it, so
nothing a test creates outlives it. `ip` is used here only to set up and to look.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from slot_helpers import slot

from meshwire.control.common.ids import wire_id
from meshwire.control.links.aside import Reaper
from meshwire.control.tables.links import End, LinkKind, LinkRow

NETNS_DIR = "/var/run/netns"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")


def ip(*args: str, check: bool = True) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


@dataclass
class Namespaces:
    prefix: str = field(default_factory=lambda: f"mwt{secrets.token_hex(3)}")
    made: list[str] = field(default_factory=list)

    def add(self, label: str) -> str:
        """Create netns `<prefix>-<label>` with lo up; return its path."""
        name = f"{self.prefix}-{label}"
        ip("netns", "add", name)
        self.made.append(name)
        ip("-n", name, "link", "set", "lo", "up")
        return f"{NETNS_DIR}/{name}"

    def recreate(self, path: str) -> str:
        """A pod restart: the netns at `path` is destroyed and a fresh one takes its name."""
        name = os.path.basename(path)
        ip("netns", "del", name)
        ip("netns", "add", name)
        ip("-n", name, "link", "set", "lo", "up")
        return path

    def remove_all(self) -> None:
        for name in self.made:
            if os.path.exists(f"{NETNS_DIR}/{name}"):
                ip("netns", "del", name, check=False)


@pytest.fixture
def namespaces() -> Iterator[Namespaces]:
    spaces = Namespaces()
    try:
        yield spaces
    finally:
        spaces.remove_all()


# How long a test's reaper may take to delete the node sides it set aside.
REAP_WAIT = 30.0


@pytest.fixture
def reaper() -> Iterator[Reaper]:
    """The test's own `Reaper`, flushed at teardown, so no set-aside interface outlives it."""
    reaper = Reaper()
    try:
        yield reaper
    finally:
        reaper.flush(REAP_WAIT)


def links(netns: str) -> dict[str, dict[str, Any]]:
    """`ip -d -j link` of a netns, by interface name."""
    name = os.path.basename(netns)
    return {item["ifname"]: item for item in json.loads(ip("-n", name, "-d", "-j", "link"))}


def carrier(netns: str, intf: str) -> bool:
    """Whether `intf` in `netns` has carrier (LOWER_UP); it must be admin-up."""
    flags = links(netns)[intf]["flags"]
    assert "UP" in flags, f"{intf} is admin-down: {flags}"
    return "LOWER_UP" in flags


def addresses(netns: str, intf: str) -> set[str]:
    """The global-scope addresses of `intf` as CIDRs."""
    name = os.path.basename(netns)
    out = json.loads(ip("-n", name, "-j", "addr", "show", "dev", intf))
    return {
        f"{a['local']}/{a['prefixlen']}"
        for item in out
        for a in item.get("addr_info", [])
        if a.get("scope") == "global"
    }


def pings(netns: str, address: str) -> bool:
    """One ping from `netns` to `address` (an address inside a test namespace)."""
    name = os.path.basename(netns)
    done = subprocess.run(
        ["ip", "netns", "exec", name, "ping", "-c", "1", "-W", "2", address],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def veth_row(
    a: str,
    b: str,
    *,
    uid: int = 1,
    a_intf: str = "eth1",
    b_intf: str = "eth1",
    a_ip: str = "",
    b_ip: str = "",
    mtu: int = 1500,
) -> LinkRow:
    return LinkRow(
        namespace="lab",
        uid=uid,
        kind=LinkKind.VETH,
        local=End(pod="r1", netns=a, intf=a_intf, ip=a_ip),
        peer=End(pod="r2", netns=b, intf=b_intf, ip=b_ip),
        mtu=mtu,
    )


def netns_name(path: str) -> str:
    return os.path.basename(path)


def veth_across(a: str, a_intf: str, b: str, b_intf: str) -> None:
    """A veth pair straight across two netns (paths): `a_intf` in `a`, `b_intf` in `b`."""
    ip("-n", netns_name(a), "link", "add", a_intf, "type", "veth",
       "peer", b_intf, "netns", netns_name(b))  # fmt: skip


def underlay(spaces: Namespaces) -> tuple[str, str]:
    """Two "node" netns joined by a veth underlay, 192.0.2.1 and 192.0.2.2."""
    n1, n2 = spaces.add("n1"), spaces.add("n2")
    veth_across(n1, "u0", n2, "u0")
    for path, address in ((n1, "192.0.2.1/24"), (n2, "192.0.2.2/24")):
        ip("-n", netns_name(path), "addr", "add", address, "dev", "u0")
        ip("-n", netns_name(path), "link", "set", "u0", "up")
    return n1, n2


def grpc_row(pod_netns: str, local_ip: str = "10.0.0.1/30", mtu: int = 1500) -> LinkRow:
    """Pod r1's end (on this node) of link lab/5 to pod r2 on node 192.0.2.2."""
    return LinkRow(
        namespace="lab",
        uid=5,
        kind=LinkKind.GRPC,
        local=End(pod="r1", netns=pod_netns, intf="eth1", ip=local_ip),
        peer=End(pod="r2", netns="", intf="eth1"),
        mtu=mtu,
        peer_node_ip="192.0.2.2",
        wire_id=wire_id(slot("lab"), 5, "r1", "r2"),
    )


def vxlan_row(pod_netns: str, local_ip: str, peer_node_ip: str, *, vni: int = 5007) -> LinkRow:
    return LinkRow(
        namespace="lab",
        uid=7,
        kind=LinkKind.VXLAN,
        local=End(pod="r1", netns=pod_netns, intf="eth1", ip=local_ip),
        peer=End(pod="r2", netns="", intf="eth1"),
        mtu=1400,
        peer_node_ip=peer_node_ip,
        vni=vni,
    )


def macvlan_row(pod_netns: str, host_intf: str, local_ip: str = "") -> LinkRow:
    return LinkRow(
        namespace="lab",
        uid=9,
        kind=LinkKind.MACVLAN,
        local=End(pod="r1", netns=pod_netns, intf="eth3", ip=local_ip),
        peer=End(pod="localhost", netns="", intf=host_intf),
        mtu=1500,
    )


def wait_until(condition: Callable[[], bool], within: float = 5.0) -> None:
    """Poll `condition` every 20 ms; AssertionError if it is still false after `within` s."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"not within {within}s: {condition}"
        time.sleep(0.02)
