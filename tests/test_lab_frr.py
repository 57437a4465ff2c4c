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
