"""A restarted or moved pod is reachable at once: its link ends keep their MACs.

One scenario per link kind, on a whole `meshwire lab` with real daemons: r1
pings r2 over link 1, so r1's neighbour entry for r2 is REACHABLE when r2
restarts; right after, r2 answers again (a bounded wait for the links to come
back, no timing asserted), with the same MAC on its `eth1`, and r1's entry
names it. A MAC that changed would leave r1 sending into the void until the
entry aged out (up to tens of seconds over vxlan and the gRPC wire, whenever
r1's end survives the restart). `lab status --json` shows the MACs.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from lab_helpers import Lab, unique_lab

pytestmark = pytest.mark.root

R2 = "10.0.1.2"
WAIT = 60.0


def in_pod(lab: Lab, pod: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", f"{lab.prefix}default.{pod}", *argv],
        capture_output=True,
        text=True,
        check=False,
    )


def mac(lab: Lab, pod: str, intf: str) -> str:
    out = in_pod(lab, pod, "ip", "-j", "link", "show", intf)
    assert out.returncode == 0, out.stderr
    address: str = json.loads(out.stdout)[0]["address"]
    return address


def neighbour(lab: Lab, pod: str, address: str) -> dict[str, object]:
    out = in_pod(lab, pod, "ip", "-j", "neigh", "show", address)
    entries = json.loads(out.stdout or "[]")
    return dict(entries[0]) if entries else {}


def ping_until_answered(lab: Lab, started: float) -> float:
    """Seconds from `started` until r1's ping to r2 is answered (bounded)."""
    while in_pod(lab, "r1", "ping", "-c", "1", "-W", "0.2", R2).returncode != 0:
        assert time.monotonic() < started + WAIT, f"r2 never answered: {neighbour(lab, 'r1', R2)}"
    return time.monotonic() - started


def reachable(lab: Lab, r2_mac: str) -> None:
    """Until r1's entry for r2 is REACHABLE at `r2_mac` (an answered ping may leave it
    STALE or DELAY for a while: ICMP confirms no reachability; the probe does)."""
    deadline = time.monotonic() + WAIT
    while True:
        ping_until_answered(lab, time.monotonic())
        entry = neighbour(lab, "r1", R2)
        if (entry.get("lladdr"), entry.get("state")) == (r2_mac, ["REACHABLE"]):
            return
        assert time.monotonic() < deadline, entry
        time.sleep(0.2)


def status_links(lab: Lab, capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, object]]:
    capsys.readouterr()
    assert lab.run("status", "--json") == 0
    return {link["link"]: link for link in json.loads(capsys.readouterr().out)["links"]}


@pytest.mark.parametrize("kind", ["veth", "vxlan", "grpc"])
def test_a_restarted_or_moved_pod_answers_its_peer_at_once_with_the_same_mac(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with unique_lab(tmp_path) as lab:
        options = ["--nodes", "1" if kind == "veth" else "2", "--wait", "60"]
        if kind == "grpc":
            config = tmp_path / "grpc.yaml"
            config.write_text("inter_node_link_type: grpc\n")
            options += ["--config", str(config)]
        assert lab.run("up", str(lab.file), *options) == 0
        link = status_links(lab, capsys)["default/1"]
        assert link["kind"] == kind
        r2_mac = mac(lab, "r2", "eth1")
        a, b = link["a"], link["b"]
        assert isinstance(a, dict) and isinstance(b, dict)
        ends = {a["pod"]: a["mac"], b["pod"]: b["mac"]}
        assert ends == {"default/r1": mac(lab, "r1", "eth1"), "default/r2": r2_mac}

        steps = [("restart-pod", "r2")] * 3
        if kind != "veth":
            steps += [("move-pod", "r2", "node1"), ("move-pod", "r2", "node2")]
        for step in steps:
            reachable(lab, r2_mac)

            assert lab.run(*step) == 0
            seconds = ping_until_answered(lab, time.monotonic())

            with capsys.disabled():
                print(f"\n[measured] {kind}: {' '.join(step)}: r1 -> r2 answered {seconds:.2f} s "
                      "after the command returned")  # fmt: skip
            assert mac(lab, "r2", "eth1") == r2_mac
            assert neighbour(lab, "r1", R2).get("lladdr") == r2_mac
        assert status_links(lab, capsys)["default/1"]["kind"] == kind
