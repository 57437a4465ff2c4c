"""A pod restarted while the API server is down, on one node, through real processes.

The daemon takes a DEL or an ADD into its own tables at once, so the pod's
links follow it during the outage. A DEL asks the runtime to retry until its
clear is in the API; an ADD succeeds once the pod's links are up and its
sandbox is on disk, so the pod runs. A daemon restarted before the API is
back writes the placement from its sandbox store once the API returns, and
the runtime's retried DEL of the old sandbox changes nothing. Links of other
pods are never touched.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
import yaml
from scenario_helpers import OneNodeLab, loss, one_node_lab, ping_running, wait_until

from meshwire.control.lab.errors import LabError
from meshwire.control.model.topology import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.root

# CNI calls that cannot reach the API give up after 2 s instead of 30.
QUICK_CNI = "cni: {add_timeout: 2}\n"
NOT_IN_API = "status not written to the API"


def r2_links_up(lab: OneNodeLab) -> bool:
    return lab.links_up("default/r2")


def r2_links_gone(lab: OneNodeLab) -> bool:
    ends = lab.interfaces("r1"), lab.interfaces("r3")
    return "eth1" not in ends[0] and "eth2" not in ends[1]


def api_status(lab: OneNodeLab, pod: str) -> dict[str, str]:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}/{pod}"
    with urllib.request.urlopen(lab.state().host_url + path, timeout=10) as answer:
        status: dict[str, str] = yaml.safe_load(answer.read()).get("status") or {}
        return status


def test_a_pod_restarted_while_the_api_is_down_runs_and_its_placement_lands_after(
    tmp_path: Path,
) -> None:
    with one_node_lab(tmp_path, "3node.yml", config=QUICK_CNI) as lab:
        wait_until(lab.links_up, "every link up")
        r1_to_r3 = lab.interfaces("r1")["eth2"].ifindex
        old = lab.state().pod("r2").container_id
        with ping_running(lab.pod_netns("r1"), "13.13.13.3") as stop:
            with lab.api_down():
                # The runtime stops r2: its links go at once; the DEL is to be retried.
                with pytest.raises(LabError, match=NOT_IN_API):
                    lab.cni_del("r2")
                wait_until(lambda: r2_links_gone(lab), "r2's links gone during the outage")
                # It starts r2 again in a new sandbox: wired at once, and the ADD succeeds.
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
            # The runtime retries the DEL of the old sandbox: it changes nothing.
            lab.cni_del_older("r2", old)
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


def test_a_pod_stopped_again_before_the_api_is_back_is_placed_nowhere_after(
    tmp_path: Path,
) -> None:
    # The second DEL's clear is conditional on the container of an ADD the API
    # never saw, so it is dropped when the API is back: the daemon then clears
    # the old placement the API still names on this node.
    with one_node_lab(tmp_path, "3node.yml", config=QUICK_CNI) as lab:
        wait_until(lab.links_up, "every link up")
        old = lab.state().pod("r2").container_id
        with lab.api_down():
            with pytest.raises(LabError, match=NOT_IN_API):
                lab.cni_del("r2")
            lab.new_netns("r2")
            lab.cni_add("r2")
            wait_until(lambda: r2_links_up(lab), "r2 wired in its new netns, API down")
            with pytest.raises(LabError, match=NOT_IN_API):
                lab.cni_del("r2")
            wait_until(lambda: r2_links_gone(lab), "r2's links gone again")

        wait_until(
            lambda: not api_status(lab, "r2").get("container_id"),
            "r2's placement cleared in the API",
        )
        # The runtime's retried DELs, of both sandboxes, succeed and change nothing.
        lab.cni_del_older("r2", old)
        lab.cni_del("r2")
        assert api_status(lab, "r2").get("container_id", "") == ""
        assert r2_links_gone(lab)
        assert lab.ping("r1", "13.13.13.3")
