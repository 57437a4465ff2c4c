"""examples/frr/ runs as a user runs it: four FRR routers (Debian's FRR) in lab pods with
the real daemons, OSPF Full, IS-IS Up and BFD up on every adjacency, loopbacks reachable,
and again after a router's pod restarts; `down` leaves no process of the lab. Over vxlan
and over grpc: pulls, plugs, 100 % loss and `--clear` move the kernel's routes exactly as
the ring's shortest paths say, and neither they nor the daemons' restarts replace a port,
restart an adjacency that should stay, or change what LLDP sees.

Slow for a test file (about 40 s idle per lab; allow minutes on a loaded machine): FRR's
start and OSPF's convergence are real, each wait bounded by a deadline, no sleep but the
one that outlasts the protocols' timers."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from lab_helpers import Lab, lab_exec, pid_alive, unique_lab
from paths import REPO

pytestmark = pytest.mark.root

LAB_FILE = REPO / "examples" / "frr" / "frr.clab.yml"
# Each router's port to each of its neighbours in the ring r1-r2-r3-r4-r1 (the lab file).
PORTS = {
    "r1": {"r2": "eth1", "r4": "eth2"},
    "r2": {"r1": "eth1", "r3": "eth2"},
    "r3": {"r2": "eth1", "r4": "eth2"},
    "r4": {"r3": "eth1", "r1": "eth2"},
}
ROUTERS = list(PORTS)


def loopback(router: str) -> str:
    return f"10.0.0.{router[1:]}"


# Each router's OSPF neighbours, by router id.
NEIGHBOURS = {router: {loopback(n) for n in ports} for router, ports in PORTS.items()}
# Hello 1 s and dead 8 s converge in seconds; a loaded machine may take much longer.
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
    with unique_lab(tmp_path) as lab:
        assert lab.run("up", str(LAB_FILE), "--nodes", "2") == 0
        for router in ROUTERS:
            assert lab_exec(lab, router, "hostname").stdout == f"{router}\n"
            # Its own bound config, once its daemons answer vtysh (`cmd` starts them).
            deadline = time.monotonic() + CONVERGE_DEADLINE
            while not (shown := running_config(lab, router)):
                assert time.monotonic() < deadline, f"{router}'s vtysh never answered"
                time.sleep(POLL)
            assert f"hostname {router}" in shown
        wait_converged(lab, ROUTERS)
        wait_pings(lab, "r1", 1)

        assert lab.run("restart-pod", "r2") == 0
        wait_converged(lab, ROUTERS)
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
    config = tmp_path / "config.yaml"
    config.write_text(f"inter_node_link_type: {transport}\n")
    with unique_lab(tmp_path) as lab:
        assert lab.run("up", str(LAB_FILE), "--nodes", "2", "--config", str(config)) == 0
        wait_converged(lab, ROUTERS)
        wait_lldp(lab)
        before = {r: (ospf_up_since(lab, r), bfd_downs(lab, r), ifindexes(lab, r)) for r in ROUTERS}
        started = time.monotonic()

        assert lab.run("kill-daemon", "node1") == 0
        assert lab.run("kill-daemon", "node2") == 0
        # Longer than OSPF's dead interval (8 s) and BFD's detection time (3 s), and than
        # a new daemon takes to adopt the workers.
        time.sleep(9)

        elapsed_ms = (time.monotonic() - started) * 1000
        for router in ROUTERS:
            ospf_before, _, links_before = before[router]
            ospf_after, bfd_after = ospf_up_since(lab, router), bfd_downs(lab, router)
            assert set(ospf_after) == NEIGHBOURS[router], (router, ospf_after)
            for rid, uptime in ospf_after.items():
                # No restart: up at least as long as before plus the time since, bar 1 s
                # for FRR's own rounding and the time between the reads.
                assert uptime >= ospf_before[rid] + elapsed_ms - 1000, (router, rid, uptime)
            # Every session up, and none went down since (a loaded machine may have
            # flapped one while the lab converged, before the daemons were killed).
            assert bfd_after == {
                peer: ("up", downs) for peer, (_, downs) in before[router][1].items()
            }, (router, bfd_after)
            assert ifindexes(lab, router) == links_before, router
        wait_lldp(lab)


Routes = dict[str, frozenset[str]]


def link_up(a: str, b: str, pulled: frozenset[str]) -> bool:
    """Whether the link between routers a and b carries, its cable not among `pulled`
    (each named by one of its ports, as "r1:eth1")."""
    return f"{a}:{PORTS[a][b]}" not in pulled and f"{b}:{PORTS[b][a]}" not in pulled


def hops_to(target: str, pulled: frozenset[str]) -> dict[str, int]:
    """Each router's number of links to `target` over the links that carry."""
    hops, frontier = {target: 0}, [target]
    while frontier:
        following = []
        for router in frontier:
            for n in PORTS[router]:
                if link_up(router, n, pulled) and n not in hops:
                    hops[n] = hops[router] + 1
                    following.append(n)
        frontier = following
    return hops


def expected_routes(router: str, pulled: frozenset[str] = frozenset()) -> Routes:
    """The first ports of every shortest path from `router` to each other router's
    loopback: every link costs 10, so equal paths are all taken."""
    routes = {}
    for target in ROUTERS:
        hops = hops_to(target, pulled)
        if target == router or router not in hops:
            continue
        routes[target] = frozenset(
            port
            for n, port in PORTS[router].items()
            if link_up(router, n, pulled) and hops.get(n) == hops[router] - 1
        )
    return routes


def kernel_routes(lab: Lab, router: str) -> Routes:
    """The ports of the router's kernel routes to the other routers' loopbacks."""
    shown = lab_exec(lab, router, "--", "ip", "-j", "route", "show")
    routes = {}
    for route in json.loads(shown.stdout or "[]"):
        target = f"r{route['dst'].removeprefix('10.0.0.')}"
        if target in PORTS:
            hops = route.get("nexthops") or [route]
            routes[target] = frozenset(hop["dev"] for hop in hops)
    return routes


def wait_routes(lab: Lab, pulled: frozenset[str] = frozenset()) -> float:
    """Until every router's kernel routes are the shortest paths without the pulled
    links; the seconds that took."""
    started = time.monotonic()
    for router in ROUTERS:
        want = expected_routes(router, pulled)
        while (have := kernel_routes(lab, router)) != want:
            assert time.monotonic() < started + CONVERGE_DEADLINE, (router, have, want)
            time.sleep(0.05)
    return time.monotonic() - started


def lldp_neighbours(lab: Lab, router: str) -> dict[str, str]:
    """Each port's LLDP neighbour, by the name its chassis announces."""
    shown = lab_exec(lab, router, "--", "lldpcli", "show", "neighbors", "-f", "json")
    if shown.returncode != 0:
        return {}
    ports = json.loads(shown.stdout).get("lldp", {}).get("interface", [])
    ports = ports if isinstance(ports, list) else [ports]  # one neighbour: not a list
    return {port: next(iter(seen["chassis"])) for entry in ports for port, seen in entry.items()}


def wait_lldp(lab: Lab) -> None:
    deadline = time.monotonic() + CONVERGE_DEADLINE
    for router in ROUTERS:
        want = {port: n for n, port in PORTS[router].items()}
        while (have := lldp_neighbours(lab, router)) != want:
            assert time.monotonic() < deadline, (router, have, want)
            time.sleep(POLL)


def carrier(lab: Lab, router: str, port: str) -> tuple[bool, bool]:
    """(admin up, has carrier) of a router's port."""
    shown = lab_exec(lab, router, "--", "ip", "-j", "link", "show", port)
    flags = json.loads(shown.stdout)[0]["flags"]
    return "UP" in flags, "LOWER_UP" in flags


def bfd_session_down(lab: Lab, router: str, peer: str, downs_before: int) -> bool:
    status, downs = bfd_downs(lab, router).get(peer, ("?", 0))
    return status != "up" and downs > downs_before


@pytest.mark.timeout(600)
@pytest.mark.parametrize("transport", ["vxlan", "grpc"])
def test_pulls_and_full_loss_reroute_and_leave_the_routing_as_it_was(
    tmp_path: Path, transport: str, record_property: Callable[[str, object], None]
) -> None:
    """Issue 38, as the routers see it: a pulled cable moves the routes around the ring
    and the plug puts back exactly the routing from before; 100 % loss is found by BFD
    (the port keeps its carrier) and `--clear` brings the adjacency back. No router's
    port is replaced throughout, and LLDP names the same neighbours at the end."""
    pulled = frozenset({"r1:eth1"})
    r2_on_r1_eth1 = "10.1.1.2"
    config = tmp_path / "config.yaml"
    config.write_text(f"inter_node_link_type: {transport}\n")
    with unique_lab(tmp_path) as lab:
        assert lab.run("up", str(LAB_FILE), "--nodes", "2", "--config", str(config)) == 0
        wait_converged(lab, ROUTERS)
        wait_routes(lab)
        wait_lldp(lab)
        before = {r: (kernel_routes(lab, r), ifindexes(lab, r)) for r in ROUTERS}

        started = time.monotonic()
        assert lab.run("link", "r1:eth1", "down") == 0
        record_property("pull_rerouted_s", wait_routes(lab, pulled) + started - time.monotonic())
        assert carrier(lab, "r1", "eth1") == (True, False)
        assert carrier(lab, "r2", "eth1") == (True, False)

        assert lab.run("link", "r1:eth1", "up") == 0
        wait_converged(lab, ROUTERS)
        wait_routes(lab)
        assert {r: (kernel_routes(lab, r), ifindexes(lab, r)) for r in ROUTERS} == before

        downs = bfd_downs(lab, "r1")[r2_on_r1_eth1][1]
        assert lab.run("impair", "r1:eth1", "--loss", "100") == 0
        deadline = time.monotonic() + CONVERGE_DEADLINE
        while not bfd_session_down(lab, "r1", r2_on_r1_eth1, downs):
            assert time.monotonic() < deadline, bfd_downs(lab, "r1")
            time.sleep(POLL)
        wait_routes(lab, pulled)
        assert carrier(lab, "r1", "eth1") == (True, True)

        started = time.monotonic()
        assert lab.run("impair", "r1:eth1", "--clear") == 0
        while "10.0.0.2" not in full_neighbours(lab, "r1"):
            assert time.monotonic() < started + CONVERGE_DEADLINE, full_neighbours(lab, "r1")
            time.sleep(0.05)
        record_property("clear_full_again_s", time.monotonic() - started)
        wait_converged(lab, ROUTERS)
        wait_routes(lab)
        assert {r: (kernel_routes(lab, r), ifindexes(lab, r)) for r in ROUTERS} == before
        wait_lldp(lab)
