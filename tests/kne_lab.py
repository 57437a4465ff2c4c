"""A KNE-sized lab for the real cluster: Topologies and busybox pods, each pod with an
init container that waits for its interfaces as KNE's `init-wait` does.

`ring_lab(count)`: pods r00..r{count-1} in a ring, plus a chord from each pod of the
first half to its opposite: every pod has three links (eth1 to the previous pod, eth2
to the next, eth3 across), 1.5 x count links in all, each its own /24.
"""

from __future__ import annotations

from typing import Any

from meshwire.control.model.topology import Link
from tests.kube_node import BUSYBOX_IMAGE

TOPOLOGY_API = "networkop.co.uk/v1beta1"


def _name(index: int) -> str:
    return f"r{index:02d}"


def ring_links(count: int) -> list[tuple[int, int, str, str]]:
    """(pod a, pod b, a's interface, b's interface) of every link."""
    assert count % 2 == 0 and count >= 4
    links = [(i, (i + 1) % count, "eth2", "eth1") for i in range(count)]
    links += [(i, i + count // 2, "eth3", "eth3") for i in range(count // 2)]
    return links


def ring_lab(count: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The lab's Topologies and Pods (bodies for the API)."""
    ends: dict[int, list[dict[str, Any]]] = {i: [] for i in range(count)}
    for uid, (a, b, intf_a, intf_b) in enumerate(ring_links(count), start=1):
        net = f"10.{200 + uid // 250}.{uid % 250}"
        ends[a].append(Link(uid, _name(b), intf_a, intf_b, f"{net}.1/24", f"{net}.2/24").to_dict())
        ends[b].append(Link(uid, _name(a), intf_b, intf_a, f"{net}.2/24", f"{net}.1/24").to_dict())
    topologies = [
        {
            "apiVersion": TOPOLOGY_API,
            "kind": "Topology",
            "metadata": {"name": _name(i)},
            "spec": {"links": ends[i]},
        }
        for i in range(count)
    ]
    pods = [_pod(_name(i), sorted(link["local_intf"] for link in ends[i])) for i in range(count)]
    return topologies, pods


def _pod(name: str, interfaces: list[str]) -> dict[str, Any]:
    wait = " && ".join(f"[ -e /sys/class/net/{intf} ]" for intf in interfaces)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"meshwire.test/lab": "kne"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "initContainers": [
                {
                    "name": "init-wait",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", f"until {wait}; do sleep 0.1; done"],
                }
            ],
            "containers": [
                {
                    "name": "router",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "2000000000"],
                }
            ],
        },
    }
