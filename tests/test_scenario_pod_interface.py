"""What runs in a pod never sees meshwire replace its interface, in a whole lab.

The lab has a cross-node link r1-r2 (vxlan until emulated) and a same-node
link r1-r3 (the kernel's path until emulated). A pull, a plug, the first
impairment and `--clear` each move a link between the kernel's path and the
workers; through all of them every pod interface keeps its ifindex, its kind
(veth) and its MAC, and reports one speed whatever carries it. A pull shows as
NO-CARRIER on an interface that stays admin-up.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab_helpers import ADDRESSED_LAB, Lab, in_ns, unique_lab

pytestmark = pytest.mark.root

ENDS = (("r1", "eth1"), ("r2", "eth1"), ("r1", "eth2"), ("r3", "eth1"))
RTT = re.compile(r"rtt min/avg/max/mdev = ([\d.]+)/")
WAIT = 60.0


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    placement = tmp_path / "placement.yaml"
    placement.write_text("r1: node1\nr2: node2\nr3: node1\n")
    with unique_lab(tmp_path, ADDRESSED_LAB) as lab:
        assert lab.run("up", str(lab.file), "--nodes", "2", "--placement", str(placement)) == 0
        yield lab


def shown(lab: Lab, pod: str, intf: str) -> dict[str, object]:
    out = in_ns(f"{lab.prefix}default.{pod}", "ip", "-d", "-j", "link", "show", intf).stdout
    [found] = json.loads(out)
    return found  # type: ignore[no-any-return]


def identity(lab: Lab, pod: str, intf: str) -> tuple[object, object, object]:
    """(ifindex, kind, MAC): what a router keys its port on."""
    found = shown(lab, pod, intf)
    kind = found.get("linkinfo", {}).get("info_kind")  # type: ignore[attr-defined]
    return found["ifindex"], kind, found["address"]


def identities(lab: Lab) -> list[tuple[object, object, object]]:
    return [identity(lab, pod, intf) for pod, intf in ENDS]


def has_carrier(lab: Lab, pod: str, intf: str) -> bool:
    flags = shown(lab, pod, intf)["flags"]
    assert "UP" in flags, f"{pod}:{intf} is admin-down: {flags}"  # type: ignore[operator]
    return "LOWER_UP" in flags  # type: ignore[operator]


def pings(lab: Lab, pod: str, address: str) -> bool:
    argv = ("ping", "-n", "-q", "-c", "1", "-W", "1", address)
    return in_ns(f"{lab.prefix}default.{pod}", *argv).returncode == 0


def min_rtt_ms(lab: Lab, pod: str, address: str) -> float | None:
    argv = ("ping", "-n", "-q", "-c", "5", "-i", "0.2", "-W", "2", address)
    match = RTT.search(in_ns(f"{lab.prefix}default.{pod}", *argv).stdout)
    return float(match.group(1)) if match else None


def until(condition: str, check: object) -> None:
    deadline = time.monotonic() + WAIT
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {WAIT:.0f}s: {condition}"
        time.sleep(0.2)


def speed(lab: Lab, pod: str, intf: str) -> str:
    argv = ["ip", "netns", "exec", f"{lab.prefix}default.{pod}", "cat"]
    argv.append(f"/sys/class/net/{intf}/speed")
    return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()


@pytest.mark.parametrize(
    ("end", "far", "address"),
    [(("r1", "eth1"), ("r2", "eth1"), "10.0.1.2"), (("r1", "eth2"), ("r3", "eth1"), "10.0.2.3")],
    ids=["cross-node", "same-node"],
)
def test_pull_plug_impairment_and_clear_change_carrier_never_the_interfaces(
    lab: Lab, end: tuple[str, str], far: tuple[str, str], address: str
) -> None:
    name = f"{end[0]}:{end[1]}"
    before = identities(lab)
    assert {kind for _, kind, _ in before} == {"veth"}
    assert len({speed(lab, pod, intf) for pod, intf in ENDS}) == 1
    assert pings(lab, "r1", address)

    # A pull: the link moves onto the workers, both ends lose carrier, stay admin-up.
    assert lab.run("link", name, "down") == 0
    until(
        "both ends lose carrier",
        lambda: not has_carrier(lab, *end) and not has_carrier(lab, *far),
    )
    assert identities(lab) == before
    assert lab.run("link", name, "up") == 0
    until("a ping passes again", lambda: pings(lab, "r1", address))
    assert has_carrier(lab, *end) and has_carrier(lab, *far)
    assert identities(lab) == before

    # The first impairment and --clear: onto the workers and back to the kernel's path.
    assert lab.run("impair", name, "--delay", "20") == 0
    until("the delay holds", lambda: rtt_at_least(lab, address, 20))
    assert identities(lab) == before
    assert lab.run("impair", name, "--clear") == 0
    until("the delay is gone", lambda: rtt_below(lab, address, 20))
    assert identities(lab) == before
    assert len({speed(lab, pod, intf) for pod, intf in ENDS}) == 1


def rtt_at_least(lab: Lab, address: str, ms: float) -> bool:
    """Whether r1's least RTT to `address` is `ms` or more; False if nothing answered."""
    rtt = min_rtt_ms(lab, "r1", address)
    return rtt is not None and rtt >= ms


def rtt_below(lab: Lab, address: str, ms: float) -> bool:
    """Whether r1's least RTT to `address` is below `ms`; False if nothing answered."""
    rtt = min_rtt_ms(lab, "r1", address)
    return rtt is not None and rtt < ms
