"""examples/frr/ runs as a user runs it: four FRR routers (Debian's FRR) in lab pods with
the real daemons, OSPF Full, IS-IS Up and BFD up on every adjacency, loopbacks reachable,
and again after a router's pod restarts; `down` leaves no process of the lab.

Slow for a test file (about 40 s idle; allow two minutes on a loaded machine): FRR's
start and OSPF's convergence are real, each wait bounded by a deadline, none a sleep."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from lab_helpers import Lab, lab_exec, pid_alive, unique_lab
from paths import REPO

pytestmark = pytest.mark.root

LAB_FILE = REPO / "examples" / "frr" / "frr.clab.yml"
# Each router's OSPF neighbours, by router id: the ring r1-r2-r3-r4-r1.
NEIGHBOURS = {
    "r1": {"10.0.0.2", "10.0.0.4"},
    "r2": {"10.0.0.1", "10.0.0.3"},
    "r3": {"10.0.0.2", "10.0.0.4"},
    "r4": {"10.0.0.3", "10.0.0.1"},
}
# Hello 1 s and dead 4 s converge in seconds; a loaded machine may take much longer.
CONVERGE_DEADLINE = 120.0
POLL = 0.5


def full_neighbours(lab: Lab, router: str) -> set[str]:
    shown = lab_exec(lab, router, "--", "vtysh", "-c", "show ip ospf neighbor json")
    if shown.returncode != 0:
        return set()
    try:
        neighbours = json.loads(shown.stdout).get("neighbors", {})
    except ValueError:
        return set()
    return {
        rid
        for rid, sessions in neighbours.items()
        if any(s.get("nbrState", "").startswith("Full") for s in sessions)
    }


def isis_up(lab: Lab, router: str) -> set[str]:
    """The router ids of the IS-IS neighbours that are Up (FRR 8.4 has no JSON for it)."""
    shown = lab_exec(lab, router, "--", "vtysh", "-c", "show isis neighbor").stdout
    names = {line.split()[0] for line in shown.splitlines() if " Up " in f" {line} "}
    return {f"10.0.0.{name[1:]}" for name in names if name[:1] == "r"}


def bfd_up(lab: Lab, router: str) -> int:
    shown = lab_exec(lab, router, "--", "vtysh", "-c", "show bfd peers brief").stdout
    return sum(1 for line in shown.splitlines() if line.split()[-1:] == ["up"])


def running_config(lab: Lab, router: str) -> str:
    return lab_exec(lab, router, "vtysh", "-c", "show running-config").stdout


def wait_converged(lab: Lab, routers: list[str]) -> None:
    """Until every router is Full in OSPF and Up in IS-IS with both of its neighbours,
    and its two BFD sessions are up."""
    deadline = time.monotonic() + CONVERGE_DEADLINE
    for router in routers:
        want = NEIGHBOURS[router]
        while True:
            ospf, isis, bfd = (
                full_neighbours(lab, router),
                isis_up(lab, router),
                bfd_up(lab, router),
            )
            if (ospf, isis, bfd) == (want, want, len(want)):
                break
            assert time.monotonic() < deadline, (
                f"{router} after {CONVERGE_DEADLINE:.0f}s: OSPF Full with {sorted(ospf)}, "
                f"IS-IS Up with {sorted(isis)}, {bfd} BFD sessions up; want {sorted(want)}"
            )
            time.sleep(POLL)


def wait_pings(lab: Lab, source: str, index: int) -> None:
    deadline = time.monotonic() + CONVERGE_DEADLINE
    for n in range(1, 5):
        if n == index:
            continue
        argv = ["ping", "-c", "1", "-W", "2", "-I", f"10.0.0.{index}", f"10.0.0.{n}"]
        while lab_exec(lab, source, "--", *argv).returncode != 0:
            assert time.monotonic() < deadline, f"{source} cannot reach 10.0.0.{n}"
            time.sleep(POLL)


def test_frr_example_converges_restarts_and_goes(tmp_path: Path) -> None:
    routers = list(NEIGHBOURS)
    with unique_lab(tmp_path) as lab:
        assert lab.run("up", str(LAB_FILE), "--nodes", "2") == 0
        for router in routers:
            assert lab_exec(lab, router, "hostname").stdout == f"{router}\n"
            # Its own bound config, once its daemons answer vtysh (`cmd` starts them).
            deadline = time.monotonic() + CONVERGE_DEADLINE
            while not (shown := running_config(lab, router)):
                assert time.monotonic() < deadline, f"{router}'s vtysh never answered"
                time.sleep(POLL)
            assert f"hostname {router}" in shown
        wait_converged(lab, routers)
        wait_pings(lab, "r1", 1)

        assert lab.run("restart-pod", "r2") == 0
        wait_converged(lab, routers)
        wait_pings(lab, "r2", 2)

        state = json.loads((lab.directory / "state.json").read_text())
        started = [p["pid"] for p in state["processes"]]
        assert lab.run("down") == 0
        assert not any(pid_alive(pid) for pid in started)


def ospf_up_since(lab: Lab, router: str) -> dict[str, int]:
    """Each Full OSPF neighbour's uptime in ms: it starts again at 0 when the adjacency
    drops and comes back."""
    shown = lab_exec(lab, router, "--", "vtysh", "-c", "show ip ospf neighbor json")
    neighbours = json.loads(shown.stdout)["neighbors"]
    return {
        rid: int(sessions[0]["upTimeInMsec"])
        for rid, sessions in neighbours.items()
        if sessions[0].get("nbrState", "").startswith("Full")
    }


def bfd_downs(lab: Lab, router: str) -> dict[str, tuple[str, int]]:
    """Each BFD session's (status, how often it went down)."""
    shown = lab_exec(lab, router, "--", "vtysh", "-c", "show bfd peers counters json")
    peers = json.loads(shown.stdout)
    brief = lab_exec(lab, router, "--", "vtysh", "-c", "show bfd peers json")
    status = {p["peer"]: p["status"] for p in json.loads(brief.stdout)}
    return {p["peer"]: (status.get(p["peer"], "?"), int(p["session-down"])) for p in peers}


def ifindexes(lab: Lab, router: str) -> dict[str, int]:
    shown = lab_exec(lab, router, "--", "ip", "-j", "link", "show")
    return {i["ifname"]: int(i["ifindex"]) for i in json.loads(shown.stdout)}


@pytest.mark.parametrize("transport", ["vxlan", "grpc"])
def test_killing_every_daemon_changes_nothing_the_routers_see(
    tmp_path: Path, transport: str
) -> None:
    """Issue 38: both nodes' daemons SIGKILLed and started again (the workers carrying
    the grpc links outlive them): no OSPF adjacency restarts, no BFD session goes down,
    no interface of any router is replaced."""
    routers = list(NEIGHBOURS)
    config = tmp_path / "config.yaml"
    config.write_text(f"inter_node_link_type: {transport}\n")
    with unique_lab(tmp_path) as lab:
        assert lab.run("up", str(LAB_FILE), "--nodes", "2", "--config", str(config)) == 0
        wait_converged(lab, routers)
        before = {r: (ospf_up_since(lab, r), bfd_downs(lab, r), ifindexes(lab, r)) for r in routers}
        assert all(downs == 0 for r in routers for _, downs in before[r][1].values()), before
        started = time.monotonic()

        assert lab.run("kill-daemon", "node1") == 0
        assert lab.run("kill-daemon", "node2") == 0
        # Longer than OSPF's dead interval (4 s) and BFD's detection time (5 s), and than
        # a new daemon takes to adopt the workers.
        time.sleep(6)

        elapsed_ms = (time.monotonic() - started) * 1000
        for router in routers:
            ospf_before, _, links_before = before[router]
            ospf_after, bfd_after = ospf_up_since(lab, router), bfd_downs(lab, router)
            assert set(ospf_after) == NEIGHBOURS[router], (router, ospf_after)
            for rid, uptime in ospf_after.items():
                # No restart: up at least as long as before plus the time since, bar 1 s
                # for FRR's own rounding and the time between the reads.
                assert uptime >= ospf_before[rid] + elapsed_ms - 1000, (router, rid, uptime)
            assert bfd_after == {peer: ("up", 0) for peer in before[router][1]}, (
                router,
                bfd_after,
            )
            assert ifindexes(lab, router) == links_before, router
