"""Issue #39: a Topology status that names a netns no CNI ADD put a pod in builds nothing.

Whoever may patch a Topology's status could name any namespace on the node;
the daemon runs as root. Here the issue's attack is replayed against a real
daemon over the embedded API: two Topology objects whose statuses, patched
by hand, place them on this node in namespaces the test made itself (no CNI
ADD ever named them). The daemon builds nothing there, counts and reports
the refusal, and the links of the pods its CNI did add keep working.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from api_helpers import TOPOLOGIES, call, create, sync_api, topology
from scenario_helpers import DaemonNode, api_serving, both_up, daemon_node, read_interfaces

from meshwire.control.model.topology import API_VERSION, KIND, PLURAL

pytestmark = pytest.mark.root


def attacker(name: str, links: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"links": links},
    }


def link(uid: int, peer: str, local: str, remote: str, ip: str = "") -> dict[str, Any]:
    spec = {"uid": uid, "peer_pod": peer, "local_intf": local, "peer_intf": remote}
    return {**spec, "local_ip": ip} if ip else spec


def carries(netns: str, intf: str) -> bool:
    """Whether `intf` is in `netns`, up, with carrier."""
    found = read_interfaces(netns).get(intf)
    return found is not None and found.up


def detached(netns: str, intf: str) -> bool:
    """Whether `intf` is in `netns` without carrier."""
    found = read_interfaces(netns).get(intf)
    return found is not None and not found.up


def refused(node: DaemonNode, action: str) -> float:
    value = node.daemon.metrics.registry.get_sample_value(
        "meshwire_netns_refused_total", {"action": action}
    )
    return value or 0.0


async def test_a_forged_status_builds_nothing_and_the_pods_other_links_stay(
    tmp_path: Path,
) -> None:
    async with daemon_node(tmp_path) as node, api_serving(node) as url:
        api = sync_api(url)
        # r1 runs here (ADDed) with a link to r2 (ADDed) and one to p1 (forged).
        r1_spec = topology("r1", "r2")
        r1_spec["spec"]["links"].append(link(2, "p1", "eth2", "eth1"))
        await call(create, api, r1_spec)
        await call(create, api, topology("r2", "r1"))
        await call(
            create,
            api,
            attacker(
                "p1", [link(2, "r1", "eth1", "eth2"), link(3, "p2", "pwn1", "pwn2", "10.66.0.1/30")]
            ),
        )
        await call(create, api, attacker("p2", [link(3, "p1", "pwn2", "pwn1", "10.66.0.2/30")]))
        r1, r2 = node.pod_netns("r1"), node.pod_netns("r2")
        assert (await node.cni("ADD", "r1", "c1", r1)).exit == 0
        assert (await node.cni("ADD", "r2", "c2", r2)).exit == 0
        await node.wait(lambda: both_up(r1, r2), "r1-r2 up")

        # Two namespaces made by hand, named in the forged statuses.
        victims = {"p1": node.pod_netns("victim"), "p2": node.pod_netns("victim")}
        for pod, victim in victims.items():
            await call(
                api.patch_namespaced_custom_object_status,
                *TOPOLOGIES,
                "default",
                PLURAL,
                pod,
                {"status": {"src_ip": "127.0.0.1", "net_ns": victim}},
            )

        # The forged placements reach the daemon, derive rows, and each build is refused.
        await node.wait(
            lambda: refused(node, "build") >= 2 or any(map(read_interfaces, victims.values())),
            "both forged builds refused (or done)",
        )
        refusals = ("link default/2", "link default/3")
        await node.wait_status(
            url,
            "p1",
            lambda s: (
                all(link in s.get("plumbing_error", "") for link in refusals)
                and "no CNI ADD on this node" in s["plumbing_error"]
            ),
            "p1's plumbing_error naming both refused links",
        )
        for victim in victims.values():
            assert read_interfaces(victim) == {}, victim
        # r1's link to the forged p1 is not built either (p1's end is in a victim): r1
        # has no eth2 with carrier...
        await node.wait(lambda: not carries(r1, "eth2"), "r1's eth2 without carrier")
        # ...and its link to r2 is untouched.
        assert both_up(r1, r2)
        assert read_interfaces(r1)["eth1"].alias == "meshwire:default/1"

        # A full pass re-checks every row: still nothing in the victims.
        node.daemon.reconciler.verify_all()
        before = refused(node, "build")
        await node.wait(lambda: refused(node, "build") > before, "the rows checked again")
        for victim in victims.values():
            assert read_interfaces(victim) == {}, victim


async def test_a_forged_peer_leaves_the_handed_pods_end_in_place_without_carrier(
    tmp_path: Path,
) -> None:
    # r1 (ADDed) links to p1, which runs nowhere: r1's eth2 is there, without carrier.
    # Then p1's status is forged onto this node: the link would be a veth into a
    # namespace no ADD handed, which is refused. r1's end is its own: it stays, as
    # it is, without carrier, as for any far end that does not exist.
    async with daemon_node(tmp_path) as node, api_serving(node) as url:
        api = sync_api(url)
        await call(create, api, topology("r1", "p1"))
        await call(create, api, attacker("p1", [link(1, "r1", "eth1", "eth1")]))
        r1 = node.pod_netns("r1")
        assert (await node.cni("ADD", "r1", "c1", r1)).exit == 0
        await node.wait(lambda: detached(r1, "eth1"), "r1's eth1 without carrier")
        before = read_interfaces(r1)["eth1"]

        await call(
            api.patch_namespaced_custom_object_status,
            *TOPOLOGIES,
            "default",
            PLURAL,
            "p1",
            {"status": {"src_ip": "127.0.0.1", "net_ns": node.pod_netns("victim")}},
        )
        await node.wait(lambda: refused(node, "build") >= 1, "the forged build refused")
        queue = node.daemon.queue
        await node.wait(lambda: queue.depth == queue.in_flight == 0, "the detached row's removal")
        assert read_interfaces(r1).get("eth1") == before
