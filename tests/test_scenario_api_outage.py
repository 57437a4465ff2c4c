"""A pod restarted while the API server is down, on one node, through real processes.

The daemon takes a DEL or an ADD into its own tables at once, so the pod's
links follow it during the outage; it asks the runtime to retry until the
placement is in the API, and the runtime's retries after the outage settle
where the pod really is. Links of other pods are never touched.
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


def test_a_pod_restarted_while_the_api_is_down_follows_at_once_and_settles_after(
    tmp_path: Path,
) -> None:
    with one_node_lab(tmp_path, "3node.yml", config=QUICK_CNI) as lab:
        wait_until(lab.links_up, "every link up")
        r1_to_r3 = lab.interfaces("r1")["eth2"].ifindex
        with ping_running(lab.pod_netns("r1"), "13.13.13.3") as stop:
            with lab.api_down():
                # The runtime stops r2: its links go at once; the DEL is to be retried.
                with pytest.raises(LabError, match=NOT_IN_API):
                    lab.cni_del("r2")
                wait_until(lambda: r2_links_gone(lab), "r2's links gone during the outage")
                # It starts r2 again in a new sandbox: wired at once, still to be retried.
                lab.new_netns("r2")
                with pytest.raises(LabError, match=NOT_IN_API):
                    lab.cni_add("r2")
                wait_until(lambda: r2_links_up(lab), "r2 wired in its new netns, API down")
                assert lab.ping("r2", "12.12.12.1")

            # The API is back. The runtime retries as kubelet does: DEL of the
            # sandbox whose ADD failed, then a new sandbox and its ADD.
            lab.cni_del("r2")
            wait_until(lambda: r2_links_gone(lab), "r2's links gone with its sandbox")
            lab.new_netns("r2")
            lab.cni_add("r2")
            wait_until(lambda: r2_links_up(lab), "r2 wired in its last netns")
            summary = stop()

        assert lab.ping("r2", "12.12.12.1") and lab.ping("r2", "23.23.23.3")
        container = lab.state().pod("r2").container_id
        status = api_status(lab, "r2")
        assert status["container_id"] == container
        assert status["net_ns"].endswith(container[:12])
        # The r1-r3 link was never touched: same interface, no ping lost.
        assert lab.interfaces("r1")["eth2"].ifindex == r1_to_r3
        sent, received = loss(summary)
        assert sent > 0 and received == sent, summary
