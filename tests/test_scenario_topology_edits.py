"""Issue #3: a running topology is edited with `meshwire apply`, on one node.

The lab is meshnet's 3node.yml with every pod on one node; each test edits the
Topology objects as a user would (remove a link, add one, change an address)
and applies them. What must follow: the kernel changes exactly as the edit says
and nothing else is touched (every other interface keeps its ifindex).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from scenario_helpers import (
    Interface,
    OneNodeLab,
    link_of,
    loss,
    one_node_lab,
    ping_running,
    run_in,
    topologies,
    wait_until,
)

pytestmark = pytest.mark.root

PODS = ("r1", "r2", "r3")


def snapshot(lab: OneNodeLab) -> dict[str, dict[str, Interface]]:
    return {pod: lab.interfaces(pod) for pod in PODS}


def settled_snapshot(lab: OneNodeLab) -> dict[str, dict[str, Interface]]:
    """The interfaces once every link of the lab file is up (operstate lags a moment)."""
    wait_until(lab.links_up, "every link end up")
    return snapshot(lab)


def by_name(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {obj["metadata"]["name"]: obj for obj in objects}


def remove_link_3(lab: OneNodeLab) -> None:
    """Apply 3node.yml without link 3 (r2:eth2 -- r3:eth2); wait until both ends are gone."""
    edited = by_name(topologies("3node.yml"))
    for pod in ("r2", "r3"):
        edited[pod]["spec"]["links"] = [x for x in edited[pod]["spec"]["links"] if x["uid"] != 3]
    lab.apply(list(edited.values()))
    wait_until(
        lambda: "eth2" not in lab.interfaces("r2") and "eth2" not in lab.interfaces("r3"),
        "both ends of link 3 gone",
    )


def test_a_link_removed_from_a_running_topology_loses_both_ends_and_nothing_else(
    tmp_path: Path,
) -> None:
    with one_node_lab(tmp_path, "3node.yml") as lab:
        before = settled_snapshot(lab)
        remove_link_3(lab)
        del before["r2"]["eth2"], before["r3"]["eth2"]
        assert snapshot(lab) == before
        assert lab.ping("r2", "12.12.12.1") and lab.ping("r3", "13.13.13.1")


def test_an_api_server_restart_stops_no_link_and_a_later_edit_still_arrives(
    tmp_path: Path,
) -> None:
    with one_node_lab(tmp_path, "3node.yml") as lab:
        before = settled_snapshot(lab)
        with ping_running(lab.pod_netns("r1"), "12.12.12.2") as stop:
            lab.kill_api()
            # The daemon's watch broke; it is back once it counted a reconnect.
            wait_until(
                lambda: lab.metric('meshwire_informer_total{what="reconnects"}') >= 1,
                "the daemon watching the restarted API",
            )
            summary = stop()
        sent, received = loss(summary)
        assert sent > 0 and received == sent, summary
        assert snapshot(lab) == before

        remove_link_3(lab)


def delete_topology(lab: OneNodeLab, name: str) -> None:
    """`meshwire delete -f` of a file holding the pod's Topology as 3node.yml has it."""
    output = lab.delete([by_name(topologies("3node.yml"))[name]])
    assert output == f"topology.networkop.co.uk/{name} deleted\n"


def test_a_topology_deleted_and_created_again_while_its_pod_runs_gets_its_links_back(
    tmp_path: Path,
) -> None:
    # The new object has no status; the daemon that runs r2 writes r2's placement
    # again (PlacementKeeper), so r2's links are derived and built once more.
    with one_node_lab(tmp_path, "3node.yml") as lab:
        settled_snapshot(lab)
        delete_topology(lab, "r2")
        wait_until(lambda: "eth1" not in lab.interfaces("r2"), "r2's links gone with its object")

        lab.apply([by_name(topologies("3node.yml"))["r2"]])
        wait_until(lambda: lab.ping("r1", "12.12.12.2"), "a ping from r1 to r2 again")
        assert lab.ping("r3", "23.23.23.2")
        pods = {p["pod"]: p for p in lab.status()["pods"]}
        assert pods["default/r2"]["node"] == "node1"


def test_a_topology_deleted_and_created_again_while_the_daemon_is_down_keeps_its_links(
    tmp_path: Path,
) -> None:
    # The API forgot where r2 runs while no daemon watched. The restarted daemon
    # knows from its own record of the sandboxes it added, writes r2's placement
    # back before it derives any link, and so keeps r2's links as they are.
    with one_node_lab(tmp_path, "3node.yml") as lab:
        before = settled_snapshot(lab)
        with lab.daemon_down():
            delete_topology(lab, "r2")
            lab.apply([by_name(topologies("3node.yml"))["r2"]])

        assert lab.ping("r1", "12.12.12.2")
        assert lab.ping("r3", "23.23.23.2")
        assert snapshot(lab) == before
        node_ip = lab.state().nodes["node1"].ip
        wait_until(lambda: src_ip(lab, "default/r2") == node_ip, "r2's placement in the API")


def src_ip(lab: OneNodeLab, pod: str) -> str:
    return str({p["pod"]: p for p in lab.status()["pods"]}[pod]["src_ip"])


def test_a_links_mtu_given_on_one_end_changes_both_ends_in_place(tmp_path: Path) -> None:
    # meshnet #54: a NOS that cannot set an MTU itself gets it from the topology.
    with one_node_lab(tmp_path, "3node.yml") as lab:
        before = settled_snapshot(lab)
        edited = by_name(topologies("3node.yml"))
        link_of(edited["r1"], 1)["mtu"] = 9000
        lab.apply([edited["r1"]])

        def jumbo() -> bool:
            return all(lab.interfaces(pod)["eth1"].mtu == 9000 for pod in ("r1", "r2"))

        wait_until(jumbo, "both ends of link 1 at MTU 9000")
        after = snapshot(lab)
        for pod in ("r1", "r2"):
            after[pod]["eth1"] = dataclasses.replace(after[pod]["eth1"], mtu=1500)
        assert after == before
        # 9000 bytes of IP, not to be fragmented, cross it.
        argv = ["ping", "-c", "1", "-M", "do", "-s", "8972", "-w", "3", "12.12.12.2"]
        done = run_in(lab.pod_netns("r1"), argv)
        assert done.returncode == 0, done.stdout + done.stderr


def test_a_link_added_to_a_running_topology_is_created(tmp_path: Path) -> None:
    # meshnet #81: links added after the pods started were never created.
    with one_node_lab(tmp_path, "3node.yml") as lab:
        before = settled_snapshot(lab)
        edited = by_name(topologies("3node.yml"))
        edited["r1"]["spec"]["links"].append(
            {"uid": 4, "peer_pod": "r2", "local_intf": "eth3", "peer_intf": "eth3",
             "local_ip": "14.14.14.1/24", "peer_ip": "14.14.14.2/24"}
        )  # fmt: skip
        edited["r2"]["spec"]["links"].append(
            {"uid": 4, "peer_pod": "r1", "local_intf": "eth3", "peer_intf": "eth3",
             "local_ip": "14.14.14.2/24", "peer_ip": "14.14.14.1/24"}
        )  # fmt: skip
        lab.apply(list(edited.values()))

        wait_until(lambda: lab.ping("r1", "14.14.14.2"), "a ping across the new link 4")
        after = snapshot(lab)
        new_r1, new_r2 = after["r1"].pop("eth3"), after["r2"].pop("eth3")
        assert after == before
        assert (new_r1.kind, new_r1.addresses, new_r1.alias) == (
            "veth",
            ("14.14.14.1/24",),
            "meshwire:default/4",
        )
        assert new_r2.addresses == ("14.14.14.2/24",)


def test_a_changed_local_ip_moves_the_address_and_keeps_the_interface(tmp_path: Path) -> None:
    with one_node_lab(tmp_path, "3node.yml") as lab:
        before = settled_snapshot(lab)
        edited = by_name(topologies("3node.yml"))
        link_of(edited["r1"], 1).update(local_ip="12.12.99.1/24", peer_ip="12.12.99.2/24")
        link_of(edited["r2"], 1).update(local_ip="12.12.99.2/24", peer_ip="12.12.99.1/24")
        lab.apply(list(edited.values()))

        wait_until(lambda: lab.ping("r1", "12.12.99.2"), "a ping to r2's new address")
        after = snapshot(lab)
        for pod, address in (("r1", "12.12.99.1/24"), ("r2", "12.12.99.2/24")):
            # The same interface, with the new address only: the old one is gone.
            assert after[pod]["eth1"].ifindex == before[pod]["eth1"].ifindex
            assert after[pod]["eth1"].addresses == (address,)
            del after[pod]["eth1"], before[pod]["eth1"]
        assert after == before
