"""A pod restarted while the API server is down, on one node, through real processes.

The daemon takes a DEL or an ADD into its own tables at once, so the pod's
links follow it during the outage. Each command succeeds once the sandbox
store keeps what it did (a kubelet makes the new sandbox only after the DEL
of the old one succeeded), though its status write is still on its way. A
daemon restarted before the API is back acts on its store once the API
returns: it writes the new placement, or clears the deleted one. Links of
other pods are never touched.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
import yaml
from scenario_helpers import OneNodeLab, loss, one_node_lab, ping_running, wait_until

from meshwire.control.model.topology import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.root

# CNI calls that cannot reach the API give up after 2 s instead of 30.
QUICK_CNI = "cni: {add_timeout: 2}\n"


def r2_links_up(lab: OneNodeLab) -> bool:
    return lab.links_up("default/r2")


def r2_links_gone(lab: OneNodeLab) -> bool:
    """Whether r2's far ends (r1's eth1, r3's eth2) are there without carrier."""
    ends = lab.interfaces("r1").get("eth1"), lab.interfaces("r3").get("eth2")
    return all(end is not None and not end.up for end in ends)


def api_status(lab: OneNodeLab, pod: str) -> dict[str, str]:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}/{pod}"
    request = urllib.request.Request(
        lab.state().host_url + path, headers={"Authorization": f"Bearer {lab.dir.token()}"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        status: dict[str, str] = yaml.safe_load(answer.read()).get("status") or {}
        return status


def test_a_pod_restarted_while_the_api_is_down_runs_and_its_placement_lands_after(
    tmp_path: Path,
) -> None:
    with one_node_lab(tmp_path, "3node.yml", config=QUICK_CNI) as lab:
        wait_until(lab.links_up, "every link up")
        r1_to_r3 = lab.interfaces("r1")["eth2"].ifindex
        with ping_running(lab.pod_netns("r1"), "13.13.13.3") as stop:
            with lab.api_down():
                # The runtime stops r2: the DEL succeeds, and its peers lose carrier.
                lab.cni_del("r2")
                wait_until(lambda: r2_links_gone(lab), "r2's far ends without carrier")
                # It starts r2 again in a new sandbox: wired, and the ADD succeeds.
                lab.new_netns("r2")
                lab.cni_add("r2")
                wait_until(lambda: r2_links_up(lab), "r2 wired in its new netns, API down")
                assert lab.ping("r2", "12.12.12.1")
                r2_to_r1 = lab.interfaces("r2")["eth1"].ifindex

                # The daemon restarts before the API is back: it cannot sync, and
                # leaves every link as it is.
                lab.restart_daemon()
                assert lab.ping("r2", "12.12.12.1")

            # The API is back: the restarted daemon writes r2's placement from its
            # sandbox store, over the old sandbox the API still names.
            lab.wait_ready()
            new = lab.state().pod("r2").container_id
            wait_until(
                lambda: api_status(lab, "r2").get("container_id") == new,
                "r2's new container in the API",
            )
            summary = stop()

        assert lab.ping("r2", "12.12.12.1") and lab.ping("r2", "23.23.23.3")
        status = api_status(lab, "r2")
        assert status["container_id"] == new
        assert status["net_ns"].endswith(new[:12])
        # r2's link was built once, in its new netns; the r1-r3 link was never
        # touched: same interfaces, no ping lost.
        assert lab.interfaces("r2")["eth1"].ifindex == r2_to_r1
        assert lab.interfaces("r1")["eth2"].ifindex == r1_to_r3
        sent, received = loss(summary)
        assert sent > 0 and received == sent, summary


@pytest.mark.parametrize("restart", [False, True], ids=["same daemon", "daemon restarted"])
def test_a_pod_stopped_again_before_the_api_is_back_is_placed_nowhere_after(
    tmp_path: Path, restart: bool
) -> None:
    # The API still names r2's first sandbox when it comes back, and neither
    # clear can land: each is conditional on the container its DEL deleted,
    # and the API never saw the second. The daemon clears the first sandbox's
    # placement itself, from its tables or, restarted, from its store.
    with one_node_lab(tmp_path, "3node.yml", config=QUICK_CNI) as lab:
        wait_until(lab.links_up, "every link up")
        with lab.api_down():
            lab.cni_del("r2")
            lab.new_netns("r2")
            lab.cni_add("r2")
            wait_until(lambda: r2_links_up(lab), "r2 wired in its new netns, API down")
            lab.cni_del("r2")
            wait_until(lambda: r2_links_gone(lab), "r2's far ends without carrier")
            if restart:
                lab.restart_daemon()

        lab.wait_ready()
        wait_until(
            lambda: not api_status(lab, "r2").get("container_id"),
            "r2's placement cleared in the API",
        )
        assert r2_links_gone(lab)
        assert lab.ping("r1", "13.13.13.3")
