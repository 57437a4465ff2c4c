"""Issue #3 from the user's side: meshnet's own labs with every pod on one node.

Each test runs `meshwire lab up FILE --nodes 1` (embedded API, a real daemon, the
real CNI shim) and looks at what a user would: the interfaces in each pod, a
ping across every link, `lab status --json`, the daemon's metrics.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from scenario_helpers import (
    OneNodeLab,
    add_foreign,
    loss,
    one_node_lab,
    ping_running,
    read_interfaces,
    run_in,
    wait_until,
)

from meshwire.tools.lab import pods

pytestmark = pytest.mark.root


def assert_every_link_wired(lab: OneNodeLab) -> None:
    """Both ends of every link: a veth, up, with its address; a ping across answers."""
    wait_until(lab.links_up, "every link end up")
    for link in lab.links():
        for end, other in ((link.a, link.b), (link.b, link.a)):
            namespace, _, pod = end.pod.partition("/")
            found = lab.interfaces(pod, namespace).get(end.intf)
            assert found is not None, f"{end.pod}:{end.intf} missing"
            assert (found.kind, found.up, found.addresses) == ("veth", True, (end.ip,)), found
            assert found.alias == f"meshwire:{link.namespace}/{link.uid}"
            assert lab.ping(pod, other.address, namespace), f"{link.name}: no ping reply"


@pytest.mark.parametrize("fixture", ["3node.yml", "3node-mlink.yml"])
def test_a_meshnet_lab_on_one_node_has_every_link_up_and_every_link_pings(
    tmp_path: Path, fixture: str
) -> None:
    with one_node_lab(tmp_path, fixture) as lab:
        assert_every_link_wired(lab)
        pods = {p["pod"]: p for p in lab.status()["pods"]}
        links = lab.status()["links"]
        assert {k: (p["node"], p["plumbing_error"]) for k, p in pods.items()} == {
            k: ("node1", "") for k in pods
        }
        assert all(p["src_ip"] == "169.254.0.11" for p in pods.values())
        assert [(k["kind"], k["state"]) for k in links] == [("veth", "up")] * len(lab.links())
        # Each pod has exactly the interfaces its Topology names, nothing more.
        for pod in pods:
            namespace, _, name = pod.partition("/")
            wanted = {
                end.intf for link in lab.links() for end in (link.a, link.b) if end.pod == pod
            }
            assert set(lab.interfaces(name, namespace)) == wanted


def test_a_peer_pod_restarting_in_a_new_netns_gets_its_links_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with one_node_lab(tmp_path, "3node.yml") as lab:
        r1_before = lab.interfaces("r1")
        # r3 was ADDed last: its ADD created both of its veths.
        seconds = lab.restart_pod("r3")
        with capsys.disabled():
            print(f"\n[measured] r3 restart: links up {seconds * 1000:.0f} ms after the ADD began")
        assert_every_link_wired(lab)
        r1_after = lab.interfaces("r1")
        # r1's interfaces are as they were, its end towards r3 included.
        assert r1_after["eth1"].ifindex == r1_before["eth1"].ifindex
        assert r1_after["eth2"].ifindex == r1_before["eth2"].ifindex


def test_a_pod_restarted_without_a_del_in_a_netns_at_the_same_path_gets_its_links_back(
    tmp_path: Path,
) -> None:
    # The sandbox went without a CNI DEL (a node crash, a DEL the daemon never
    # saw) and the new one has its netns at the same path: the pod's links
    # derive exactly as before, so only checking them against the kernel on the
    # ADD finds them gone.
    with one_node_lab(tmp_path, "3node.yml") as lab:
        state = lab.state()
        record = state.pod("r3")
        pods.recreate_netns(lab.dir, state, record)
        assert lab.interfaces("r3") == {}
        lab.cni_add("r3")
        assert_every_link_wired(lab)


def test_the_pod_that_did_not_create_its_veths_restarts_and_they_are_repaired(
    tmp_path: Path,
) -> None:
    # r1 was ADDed first, before any peer ran: its peers' ADDs created its veths
    # (KNE #743's "lazy half": meshnet left such a pod's links broken).
    with one_node_lab(tmp_path, "3node.yml") as lab:
        r23_before = lab.interfaces("r2")["eth2"].ifindex
        lab.restart_pod("r1")
        assert_every_link_wired(lab)
        assert lab.interfaces("r2")["eth2"].ifindex == r23_before


def test_a_daemon_killed_and_restarted_recreates_nothing_prunes_nothing_and_traffic_flows(
    tmp_path: Path,
) -> None:
    with one_node_lab(tmp_path, "3node.yml") as lab:
        # A NOS's own interface, and one an earlier meshwire left for a link gone since.
        add_foreign(lab.pod_netns("r1"), "mgmt0")
        add_foreign(lab.pod_netns("r1"), "eth9", alias="meshwire:default/99")
        wait_until(lab.links_up, "every link end up")
        before = {pod: lab.interfaces(pod) for pod in ("r1", "r2", "r3")}

        with ping_running(lab.pod_netns("r1"), "12.12.12.2") as stop:
            lab.kill_daemon()
            # The restarted daemon's prune pass removes the stale marked interface
            # (the metric counts a pass's removals when the pass ends).
            wait_until(
                lambda: lab.metric("meshwire_pruned_interfaces_total") == 1, "one interface pruned"
            )
            summary = stop()

        sent, received = loss(summary)
        assert sent > 0 and received == sent, summary
        assert "eth9" not in lab.interfaces("r1")
        del before["r1"]["eth9"]
        after = {pod: lab.interfaces(pod) for pod in ("r1", "r2", "r3")}
        assert after == before
        assert_every_link_wired(lab)


def test_an_interface_meshwire_did_not_create_is_never_deleted_even_holding_a_wanted_name(
    tmp_path: Path,
) -> None:
    with one_node_lab(tmp_path, "3node.yml") as lab:
        # r3 goes away: r2 keeps its end towards r3, without carrier. Then the NOS
        # deletes that end and makes an eth2 of its own where r3's link wants one.
        lab.cni_del("r3")
        wait_until(lambda: not lab.interfaces("r2")["eth2"].up, "r2's end towards r3 idle")
        assert run_in(lab.pod_netns("r2"), ["ip", "link", "del", "eth2"]).returncode == 0
        add_foreign(lab.pod_netns("r2"), "eth2")
        foreign = lab.interfaces("r2")["eth2"]
        lab.cni_add("r3")

        def reported() -> bool:
            pods_status = {p["pod"]: p for p in lab.status()["pods"]}
            return "meshwire did not create" in pods_status["default/r2"]["plumbing_error"]

        wait_until(reported, "a plumbing_error on r2 naming the foreign eth2")
        code, body = lab.daemon_get("/links?state=error")
        (failing,) = json.loads(body)
        ends = {(failing[end]["pod"], failing[end]["intf"]) for end in ("local", "peer")}
        assert code == 200 and ("default/r2", "eth2") in ends and failing["permanent"]
        assert "meshwire did not create" in failing["error"]
        # The same through `meshwire links`, as an operator runs it on the node: from the
        # daemon's config, which names its address and the token it asks off loopback.
        config = lab.state().nodes["node1"].config
        argv = [sys.executable, "-m", "meshwire.tools.cli", "links", "--config", config]
        shown = run_in(lab.node_netns, [*argv, "--state", "error"])
        assert shown.returncode == 0, shown.stderr
        assert "default/r2:eth2" in shown.stdout and "meshwire did not create" in shown.stdout
        lab.kill_daemon()
        assert read_interfaces(lab.pod_netns("r2"))["eth2"] == foreign
        # r3's other link is built all the same.
        assert lab.ping("r3", "13.13.13.1")


def test_a_deleted_peer_leaves_its_neighbours_interfaces_without_carrier_until_it_is_back(
    tmp_path: Path,
) -> None:
    with one_node_lab(tmp_path, "3node.yml") as lab:
        assert_every_link_wired(lab)
        before = {pod: lab.interfaces(pod) for pod in ("r1", "r2")}
        towards_r3 = [
            (other.pod.partition("/")[2], other.intf)
            for link in lab.links()
            for end, other in ((link.a, link.b), (link.b, link.a))
            if end.pod == "default/r3"
        ]
        assert towards_r3

        lab.cni_del("r3")

        def idle() -> bool:
            return all(flags(lab, pod, intf) == {"UP"} for pod, intf in towards_r3)

        wait_until(idle, "r3's neighbours up without carrier on their ends towards it")
        for pod in ("r1", "r2"):
            assert {n: i.ifindex for n, i in lab.interfaces(pod).items()} == {
                n: i.ifindex for n, i in before[pod].items()
            }
        lab.cni_add("r3")
        assert_every_link_wired(lab)
        for pod in ("r1", "r2"):
            assert lab.interfaces(pod) == before[pod]


def flags(lab: OneNodeLab, pod: str, intf: str) -> set[str]:
    """UP and LOWER_UP among `intf`'s flags: admin-up, carrier."""
    shown = run_in(lab.pod_netns(pod), ["ip", "-j", "link", "show", intf])
    assert shown.returncode == 0, shown.stderr
    [found] = json.loads(shown.stdout)
    return set(found["flags"]) & {"UP", "LOWER_UP"}
