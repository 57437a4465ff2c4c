"""Link emulation in a whole lab: real daemons and workers, edited through the CLI.

The lab has a cross-node link r1-r2 (vxlan until emulated) and a same-node
link r1-r3 (a veth until emulated); each test impairs, pulls or captures one
of them with `meshwire lab impair|link|capture`, as a user would, and checks
what the pods see: ping RTTs and losses, carrier and ifindex, pcap contents.
Delays are checked as lower bounds only (an impairment can only add), so load
on the machine cannot fail them.
"""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab_helpers import ADDRESSED_LAB, Lab, in_ns, unique_lab

from meshwire.control.links.iface_names import NodeRole, node_name
from meshwire.tools.lab.lab_names import node_ip
from meshwire.tools.lab.probe import http_get
from meshwire.tools.lab.state import LabDir

pytestmark = pytest.mark.root

RTT = re.compile(r"rtt min/avg/max/mdev = ([\d.]+)/")
LOSS = re.compile(r"(\d+) packets transmitted, (\d+) received")
WAIT = 60.0
LABEL = re.compile(r'(\w+)="([^"]*)"')
WORKER_PID = re.compile(r'^meshwire_worker_pid\{worker="\d+"\} (\S+)$', re.M)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    placement = tmp_path / "placement.yaml"
    placement.write_text("r1: node1\nr2: node2\nr3: node1\n")
    with unique_lab(tmp_path, ADDRESSED_LAB) as lab:
        assert lab.run("up", str(lab.file), "--nodes", "2", "--placement", str(placement)) == 0
        yield lab


def netns(lab: Lab, pod: str) -> str:
    return f"{lab.prefix}default.{pod}"


def ping(lab: Lab, pod: str, address: str, *args: str) -> subprocess.CompletedProcess[str]:
    return in_ns(netns(lab, pod), "ping", "-n", "-q", *args, address)


def min_rtt_ms(lab: Lab, pod: str, address: str) -> float | None:
    """The least RTT of 5 pings; None if none was answered (a link being rebuilt)."""
    answer = ping(lab, pod, address, "-c", "5", "-i", "0.2", "-W", "2")
    match = RTT.search(answer.stdout)
    return float(match.group(1)) if match else None


def until(condition: str, check: object) -> None:
    deadline = time.monotonic() + WAIT
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {WAIT:.0f}s: {condition}"
        time.sleep(0.2)


def link_line(lab: Lab, pod: str, intf: str) -> tuple[int, set[str]]:
    """(ifindex, flags) of a pod's interface."""
    out = in_ns(netns(lab, pod), "ip", "-o", "link", "show", intf).stdout
    index, _, rest = out.partition(": ")
    flags = rest.split("<", 1)[1].split(">", 1)[0].split(",") if "<" in rest else []
    return int(index or 0), set(flags)


def carrier_of(lab: Lab, pod: str, intf: str) -> tuple[int, int]:
    """(ifindex, carrier changes so far) of a pod's interface."""
    sysfs = f"/sys/class/net/{intf}"
    argv = [
        "ip",
        "netns",
        "exec",
        netns(lab, pod),
        "cat",
        f"{sysfs}/ifindex",
        f"{sysfs}/carrier_changes",
    ]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout
    index, changes = out.split()
    return int(index), int(changes)


def delayed(lab: Lab, pod: str, address: str, at_least_ms: float) -> bool:
    rtt = min_rtt_ms(lab, pod, address)
    return rtt is not None and rtt >= at_least_ms


def undelayed(lab: Lab, pod: str, address: str, below_ms: float) -> bool:
    rtt = min_rtt_ms(lab, pod, address)
    return rtt is not None and rtt < below_ms


@pytest.mark.parametrize(
    ("pod", "peer", "address"), [("r2", "r2", "10.0.1.2"), ("r3", "r3", "10.0.2.3")]
)
def test_a_delay_set_on_each_end_adds_to_the_rtt_until_cleared(
    lab: Lab, pod: str, peer: str, address: str
) -> None:
    intf = "eth1" if pod == "r2" else "eth2"
    assert lab.run("impair", f"r1:{intf}", "--delay", "20") == 0
    until("the delay holds", lambda: delayed(lab, "r1", address, 20))
    # The link is emulated now: a later change applies in place, without a flap.
    before = [carrier_of(lab, "r1", intf), carrier_of(lab, peer, "eth1")]
    assert lab.run("impair", f"{peer}:eth1", "--delay", "10") == 0
    until("both delays hold", lambda: delayed(lab, "r1", address, 30))
    assert [carrier_of(lab, "r1", intf), carrier_of(lab, peer, "eth1")] == before
    assert lab.run("impair", f"r1:{intf}", "--clear") == 0
    assert lab.run("impair", f"{peer}:eth1", "--clear") == 0
    until("the delay is gone", lambda: undelayed(lab, "r1", address, 10))


def lost(lab: Lab, count: int, rebuilding: bool = False) -> tuple[int, int]:
    """(sent, lost) of `count` pings from r1 to r2, 10 ms apart. With `rebuilding`, a
    ping that cannot start (the link's interface is being made again: no route
    for a moment) is (0, 0) instead of a failure."""
    answer = ping(lab, "r1", "10.0.1.2", "-c", str(count), "-i", "0.01", "-W", "2")
    match = LOSS.search(answer.stdout)
    if match is None and rebuilding:
        return 0, 0
    assert match, answer.stdout + answer.stderr
    return int(match.group(1)), int(match.group(1)) - int(match.group(2))


def test_loss_drops_about_the_share_set(lab: Lab) -> None:
    assert lab.run("impair", "r1:eth1", "--loss", "20") == 0

    # The first impairment moves the link onto the workers (rebuilt once): until the
    # wire carries it, some pings lost and some answered.
    def applies() -> bool:
        sent, dropped = lost(lab, 50, rebuilding=True)
        return 0 < dropped < sent

    until("the loss applies", applies)
    sent, dropped = lost(lab, 300)
    # Binomial(300, 0.2): 60 +- 35 at 5 standard deviations.
    assert sent == 300 and 25 <= dropped <= 95, dropped


def test_a_pulled_cable_leaves_both_ends_up_without_carrier_and_plugs_back_on_the_same_ifindex(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    assert lab.run("link", "r1:eth1", "down") == 0

    def pulled() -> bool:
        ends = [link_line(lab, "r1", "eth1"), link_line(lab, "r2", "eth1")]
        return all("UP" in flags and "NO-CARRIER" in flags for _, flags in ends)

    until("both ends lose carrier", pulled)
    indexes = (link_line(lab, "r1", "eth1")[0], link_line(lab, "r2", "eth1")[0])
    assert ping(lab, "r1", "10.0.1.2", "-c", "3", "-i", "0.2", "-W", "1").returncode != 0
    capsys.readouterr()
    assert lab.run("check") == 0  # a pulled link is no failure of the lab
    assert "1/1 links ok, 1 pulled" in capsys.readouterr().out
    assert lab.run("link", "r1:eth1", "up") == 0
    until(
        "a ping passes", lambda: ping(lab, "r1", "10.0.1.2", "-c", "1", "-W", "1").returncode == 0
    )
    assert (link_line(lab, "r1", "eth1")[0], link_line(lab, "r2", "eth1")[0]) == indexes


def worker_pids(lab: Lab, node: int) -> list[int]:
    answer = http_get(node_ip(node), 51100, "/metrics", netns=f"{lab.prefix}node{node}")
    assert answer is not None and answer[0] == 200
    return [int(float(m)) for m in WORKER_PID.findall(answer[1])]


def test_impairments_hold_after_the_daemon_or_its_workers_are_killed(lab: Lab) -> None:
    assert lab.run("impair", "r1:eth2", "--delay", "25") == 0
    until("the delay holds", lambda: delayed(lab, "r1", "10.0.2.3", 25))
    index = link_line(lab, "r1", "eth2")[0]
    assert lab.run("kill-daemon", "node1") == 0
    until("the delay still holds", lambda: delayed(lab, "r1", "10.0.2.3", 25))
    killed = worker_pids(lab, 1)
    assert killed
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    until("new workers run", lambda: set(worker_pids(lab, 1)).isdisjoint(killed))
    until("the delay holds with the new workers", lambda: delayed(lab, "r1", "10.0.2.3", 25))
    assert link_line(lab, "r1", "eth2")[0] == index


def test_a_capture_during_a_ping_writes_its_icmp_frames_as_pcap(lab: Lab, tmp_path: Path) -> None:
    pcap = tmp_path / "r1-eth1.pcap"
    pinger = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            netns(lab, "r1"),
            "ping",
            "-n",
            "-q",
            "-c",
            "50",
            "-i",
            "0.2",
            "10.0.1.2",
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        assert lab.run("capture", "r1:eth1", "-w", str(pcap), "-c", "5", "--seconds", "30") == 0
    finally:
        pinger.kill()
        pinger.wait()
    data = pcap.read_bytes()
    assert struct.unpack("<I", data[:4])[0] == 0xA1B2C3D4
    frames, offset = [], 24
    while offset < len(data):
        length = struct.unpack("<I", data[offset + 8 : offset + 12])[0]
        frames.append(data[offset + 16 : offset + 16 + length])
        offset += 16 + length
    assert len(frames) == 5
    icmp = [f for f in frames if f[12:14] == b"\x08\x00" and f[23] == 1]
    assert icmp and {f[34] for f in icmp} <= {0, 8}


def metrics(lab: Lab, node: int) -> str:
    answer = http_get(node_ip(node), 51100, "/metrics", netns=f"{lab.prefix}node{node}")
    assert answer is not None and answer[0] == 200
    return answer[1]


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of the first series `name` whose labels include `labels` (a value
    ending in `*` matches as a prefix); None if there is none."""
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        head, _, rest = series.partition("{")
        if head != name:
            continue
        have = dict(LABEL.findall(rest))
        if all(
            have.get(k, "").startswith(v[:-1]) if v.endswith("*") else have.get(k) == v
            for k, v in labels.items()
        ):
            return float(value)
    return None


def tap_holders(pids: list[int], intf: str) -> set[int]:
    """The processes among `pids` holding an fd on a TAP named `intf` (any netns)."""
    holders = set()
    for pid in pids:
        fdinfo = Path(f"/proc/{pid}/fdinfo")
        for entry in fdinfo.iterdir():
            try:
                text = entry.read_text()
            except OSError:
                continue  # the fd closed meanwhile
            if f"iff:\t{intf}\n" in text:
                holders.add(pid)
    return holders


def pod_status(lab: Lab, capsys: pytest.CaptureFixture[str], pod: str) -> dict[str, str]:
    capsys.readouterr()
    assert lab.run("status", "--json") == 0
    pods = {p["pod"]: p for p in json.loads(capsys.readouterr().out)["pods"]}
    return pods[f"default/{pod}"]  # type: ignore[no-any-return]


def test_a_same_node_emulated_link_is_carried_tap_to_tap_inside_one_worker(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    assert lab.run("impair", "r1:eth2", "--delay", "20") == 0
    until("the delay holds", lambda: delayed(lab, "r1", "10.0.2.3", 20))
    # One worker holds both TAPs and joins them itself: no stream, not even to its own node.
    until(
        "the worker reports the pair",
        lambda: metric(metrics(lab, 1), "meshwire_wire_tap_pairs") == 1,
    )
    text = metrics(lab, 1)
    assert metric(text, "meshwire_wire_stream_refs", peer=f"{node_ip(1)}:*") is None, text
    workers = worker_pids(lab, 1)
    # Each end's TAP is in the node's netns, named for its row (ns/uid/pod).
    r1_tap, r3_tap = (node_name(f"default/2/{pod}", NodeRole.TAP) for pod in ("r1", "r3"))
    holders = tap_holders(workers, r1_tap) | tap_holders(workers, r3_tap)
    assert len(holders) == 1 and tap_holders(workers, r1_tap) == tap_holders(workers, r3_tap)
    delayed_frames = {"pod": "r1", "intf": "eth2", "action": "delayed"}
    assert (metric(text, "meshwire_link_impaired_frames_total", **delayed_frames) or 0) > 0, text
    # The first impairment rebuilt the veth once, and the pods' Topology status says so.
    for pod, intf in (("r1", "eth2"), ("r3", "eth1")):
        until(
            f"{pod}'s status names the rebuild",
            lambda pod=pod, intf=intf: (
                f"link 2 ({intf}): rebuilt onto the workers"
                in pod_status(lab, capsys, pod)["link_rebuilds"]
            ),
        )
    # A pull: both ends up without carrier, no ping; plugged back on the same interfaces.
    indexes = (link_line(lab, "r1", "eth2")[0], link_line(lab, "r3", "eth1")[0])
    assert lab.run("link", "r3:eth1", "down") == 0

    def pulled() -> bool:
        ends = [link_line(lab, "r1", "eth2"), link_line(lab, "r3", "eth1")]
        return all("UP" in flags and "NO-CARRIER" in flags for _, flags in ends)

    until("both ends lose carrier", pulled)
    assert ping(lab, "r1", "10.0.2.3", "-c", "3", "-i", "0.2", "-W", "1").returncode != 0
    assert lab.run("link", "r3:eth1", "up") == 0
    until("the delay holds again", lambda: delayed(lab, "r1", "10.0.2.3", 20))
    assert (link_line(lab, "r1", "eth2")[0], link_line(lab, "r3", "eth1")[0]) == indexes


def links_of(lab: Lab, node: int) -> list[dict[str, object]]:
    token = LabDir(lab.directory).token()
    answer = http_get(node_ip(node), 51100, "/links", netns=f"{lab.prefix}node{node}", token=token)
    assert answer is not None and answer[0] == 200
    return json.loads(answer[1])  # type: ignore[no-any-return]


def test_vxlan_nodes_without_credentials_emulate_same_node_links_and_refuse_cross_node_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No `auth.*` file can be read: the wire stack runs local only. The same-node
    link is carried TAP to TAP with its delay; the cross-node one fails naming the key."""
    missing = tmp_path / "no-credentials"
    config = tmp_path / "base.yaml"
    config.write_text(
        "auth:\n"
        f"  ca_cert: {missing}/ca.crt\n"
        f"  ca_key: {missing}/ca.key\n"
        f"  wire_key: {missing}/wire.key\n"
    )
    placement = tmp_path / "placement.yaml"
    placement.write_text("r1: node1\nr2: node2\nr3: node1\n")
    with unique_lab(tmp_path, ADDRESSED_LAB) as lab:
        up = ("up", str(lab.file), "--nodes", "2", "--placement", str(placement))
        assert lab.run(*up, "--config", str(config)) == 0
        assert lab.run("impair", "r1:eth2", "--delay", "20") == 0
        until("the same-node delay holds", lambda: delayed(lab, "r1", "10.0.2.3", 20))
        assert lab.run("impair", "r1:eth1", "--delay", "20") == 0

        def refused() -> str:
            for entry in links_of(lab, 1):
                if entry["link"] == "default/1" and entry["state"] == "error":
                    return str(entry["error"])
            return ""

        until("the cross-node link fails", refused)
        error = refused()
        assert f"auth.wire_key: {missing}/wire.key" in error, error
        assert "to another node" in error, error
        until(
            "r1's plumbing_error names the key",
            lambda: "auth.wire_key" in pod_status(lab, capsys, "r1")["plumbing_error"],
        )
        # The same-node link still carries its delay; the daemon kept running.
        assert delayed(lab, "r1", "10.0.2.3", 20)
        text = metrics(lab, 1)
        assert metric(text, "meshwire_wire_tap_pairs") == 1, text
