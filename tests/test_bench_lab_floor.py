"""The 1,000-pod lab's kernel floor (bench/lab_floor.py): it builds the lab's links as
meshwire does, so what it times is real work, and it leaves nothing behind."""

from __future__ import annotations

import importlib
import secrets
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from meshwire.tools.lab import netns

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture
def floor(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """bench/lab_floor.py, imported as the scripts import each other."""
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("lab_floor")


def links(floor: ModuleType) -> list:
    """A ring of three pods: on two nodes, p1-p2 and p2-p3 cross nodes, p3-p1 does not."""
    return [
        floor.FloorLink(1, "p1", "eth1", "10.201.0.1/30", "p2", "eth1", "10.201.0.2/30"),
        floor.FloorLink(2, "p2", "eth2", "10.201.0.5/30", "p3", "eth1", "10.201.0.6/30"),
        floor.FloorLink(3, "p1", "eth2", "10.201.0.9/30", "p3", "eth2", "10.201.0.10/30"),
    ]


PLACEMENT = {"p1": "node1", "p2": "node2", "p3": "node1"}


def test_each_node_stitches_its_ends_to_the_other_pods_node_side_or_to_a_vxlan_device(
    floor: ModuleType,
) -> None:
    names = floor.Names("t-", ["p1", "p2", "p3"], 2)
    made, stitches = floor.node_scripts(
        links(floor), PLACEMENT, "node1", 0, ["node1", "node2"], names
    )
    assert made.splitlines() == [
        "link add s1a type veth peer name eth1 netns t-p0",
        "link set s1a up",
        "link add v1 type vxlan id 1 remote 10.99.0.2 local 10.99.0.1 dstport 4789 dev ul",
        "link set v1 up",
        "link add s2b type veth peer name eth1 netns t-p2",
        "link set s2b up",
        "link add v2 type vxlan id 2 remote 10.99.0.2 local 10.99.0.1 dstport 4789 dev ul",
        "link set v2 up",
        "link add s3a type veth peer name eth2 netns t-p0",
        "link set s3a up",
        "link add s3b type veth peer name eth2 netns t-p2",
        "link set s3b up",
    ]
    redirects = [
        f"{words[3]}>{words[-1]}"
        for words in map(str.split, stitches.splitlines())
        if words[0] == "filter"
    ]
    assert redirects == ["s1a>v1", "v1>s1a", "s2b>v2", "v2>s2b", "s3a>s3b", "s3b>s3a"]


def test_the_pods_script_addresses_and_raises_every_end_of_the_pod(floor: ModuleType) -> None:
    scripts = floor.pod_scripts(links(floor))
    assert scripts["p1"].splitlines() == [
        "link set lo up",
        "address add 10.201.0.1/30 dev eth1",
        "link set eth1 up",
        "address add 10.201.0.9/30 dev eth2",
        "link set eth2 up",
    ]


@pytest.mark.root
def test_every_link_the_floor_makes_carries_pings_and_it_removes_all_it_made(
    floor: ModuleType,
) -> None:
    prefix = f"mwtlf{secrets.token_hex(2)}"
    answered: list[str] = []

    def ping_each_link(names: Any) -> None:
        pods = names.pods
        for link in links(floor):
            target = link.b_ip.split("/")[0]
            done = subprocess.run(
                ["ip", "netns", "exec", pods[link.a], "ping", "-c", "1", "-W", "2", target],
                capture_output=True,
                check=False,
            )
            if done.returncode == 0:
                answered.append(f"{link.a}>{link.b}")

    try:
        stages: dict[str, float] = {}
        returned, up = floor.measure(
            links(floor), PLACEMENT, ["node1", "node2"], prefix, stages, ping_each_link
        )
        assert answered == ["p1>p2", "p2>p3", "p1>p3"]
        assert 0 < returned <= up
        assert set(stages) == {"netns_s", "nodes_s", "pods_s"}
        assert netns.names_with_prefix(prefix) == []
    finally:
        for name in netns.names_with_prefix(prefix):
            netns.delete(name)
