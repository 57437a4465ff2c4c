"""`lab graph -o FILE`'s content: what the picture of a lab says, in every format.

Built from examples/lab.yml as the API holds it (placement in each status),
with `/links` entries as the daemons answer them; the SVG is drawn by Graphviz
and rendered by Chromium.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from browser_helpers import Browser
from links_helpers import veth_row

from meshwire.control.daemon.link_report import link_report
from meshwire.control.tables.health import PENDING
from meshwire.tools.graph import formats, layout
from meshwire.tools.graph.live import page_state
from meshwire.tools.graph.model import build
from tests.paths import REPO as ROOT

NODES = {"169.254.0.11": "node1", "169.254.0.12": "node2"}
PODS = ("default/r1", "default/r2", "default/r3", "default/r4")
INTERFACES = {"eth1", "eth2", "eth3"}


def lab_objects(**status: dict[str, Any]) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = yaml.safe_load((ROOT / "examples/lab.yml").read_text())["items"]
    for obj in objects:
        name = obj["metadata"]["name"]
        src_ip = "169.254.0.11" if name in ("r1", "r3") else "169.254.0.12"
        obj["status"] = {"src_ip": src_ip, **status.get(name, {})}
    return objects


def report(link: str, pod: str, intf: str, up: bool = True, rx: int = 0) -> dict[str, Any]:
    counters = {"exists": True, "up": up, "rx_packets": rx, "tx_packets": 0, "rx_bytes": 64 * rx}
    return {
        "link": link,
        "kind": "vxlan",
        "local": {"pod": pod, "intf": intf, "mac": "02:00:00:00:00:01", "counters": counters},
        "peer": {},
        "state": "done",
        "error": "",
    }


def every_end_up() -> list[dict[str, Any]]:
    graph = build("lab", lab_objects(), NODES, "vxlan", [])
    return [report(link.id, end.pod, end.intf) for link in graph.links for end in (link.a, link.b)]


def test_the_dot_names_every_node_pod_interface_address_and_link_kind() -> None:
    dot = formats.to_dot(build("lab", lab_objects(), NODES, "vxlan", every_end_up()))

    for name in ("node1", "node2", *PODS, *INTERFACES, "10.99.0.17/30", "veth", "vxlan"):
        assert name in dot
    assert dot.count('" -- "') == 5
    assert 'id="link:default/5", class="link state-up"' in dot
    assert '"default/r1":"if-eth3" -- "default/r3":"if-eth3"' in dot


def test_states_come_from_the_status_the_daemons_and_the_topology() -> None:
    objects = lab_objects(r4={"plumbing_error": "r4:eth1: no such netns"})
    link2 = next(e for e in objects[1]["spec"]["links"] if e["uid"] == 2)
    link2["state"] = "down"
    link2["impairments"] = {"delay_ms": 20, "loss_pct": 1.5}
    reports = [r for r in every_end_up() if r["link"] != "default/1"]
    reports.append(report("default/1", "default/r1", "eth1"))
    reports.append(report("default/1", "default/r2", "eth1", up=False))

    graph = build("lab", objects, NODES, "vxlan", reports)
    states = {link.id: link.state for link in graph.links}

    assert states == {
        "default/1": "down",
        "default/2": "pulled",
        "default/3": "error",
        "default/4": "error",
        "default/5": "up",
    }
    assert {link.error for link in graph.links if link.state == "error"} == {
        "r4:eth1: no such netns"
    }
    (pulled,) = [link for link in graph.links if link.id == "default/2"]
    assert pulled.a.pulled and pulled.a.impairments == {"delay_ms": 20, "loss_pct": 1.5}
    assert "r2: 20ms delay, 1.5% loss" in formats.to_dot(graph)
    # A link under emulation is carried by the workers whatever the inter-node kind.
    assert "grpc pulled: eth2 -- eth1; r2 20ms delay, 1.5% loss" in formats.to_mermaid(graph)


def test_without_daemons_placed_links_are_placed_and_unplaced_pods_stand_apart() -> None:
    objects = lab_objects()
    objects[3]["status"] = {}

    graph = build("namespace default", objects, {}, "grpc")

    assert {p.id: p.node for p in graph.pods}["default/r4"] == ""
    assert graph.nodes == ("169.254.0.11", "169.254.0.12")
    assert {k.id: (k.kind, k.state) for k in graph.links} == {
        "default/1": ("grpc", "placed"),
        "default/2": ("grpc", "placed"),
        "default/3": ("grpc", "unplaced"),
        "default/4": ("grpc", "unplaced"),
        "default/5": ("veth", "placed"),
    }


def test_mermaid_and_json_carry_every_pod_and_link() -> None:
    graph = build("lab", lab_objects(), NODES, "vxlan", every_end_up())

    mermaid = formats.to_mermaid(graph)
    assert mermaid.startswith("flowchart LR\n")
    assert mermaid.count("subgraph n") == 2 and mermaid.count(" ---|") == 5
    assert '---|"veth up: eth3 -- eth3"|' in mermaid
    data = json.loads(formats.to_json(graph))
    assert [p["id"] for p in data["pods"]] == list(PODS)
    assert {(k["id"], k["state"]) for k in data["links"]} == {
        (f"default/{uid}", "up") for uid in range(1, 6)
    }
    assert data["links"][0]["a"]["mac"] == "02:00:00:00:00:01"


def test_rates_are_the_counters_difference_over_the_time_between_snapshots() -> None:
    before = build("lab", lab_objects(), NODES, "vxlan", every_end_up())
    reports = every_end_up()
    reports[0] = report(reports[0]["link"], reports[0]["local"]["pod"], "eth1", rx=50)

    state = page_state(build("lab", lab_objects(), NODES, "vxlan", reports), 1, 12.0, before, 10.0)

    assert state["links"]["default/1"]["a"]["rates"]["rx_pps"] == 25.0
    assert state["links"]["default/1"]["a"]["rates"]["rx_bps"] == 25.0 * 64 * 8
    assert state["links"]["default/1"]["b"]["rates"]["rx_pps"] == 0.0


def test_links_reports_each_ends_counters_when_asked() -> None:
    row = veth_row("/run/netns/a", "/run/netns/b", uid=3, a_intf="eth2")
    counters = {("/run/netns/a", "eth2"): {"exists": True, "rx_packets": 7}}

    (entry,) = link_report([(row, PENDING)], counters=counters)

    assert entry["local"]["counters"] == {"exists": True, "rx_packets": 7}
    assert entry["peer"]["counters"] == {}
    assert "counters" not in link_report([(row, PENDING)])[0]["local"]


def test_the_svg_names_everything_and_chromium_renders_it(tmp_path: Path) -> None:
    picture = tmp_path / "lab.svg"
    picture.write_text(layout.svg(build("lab", lab_objects(), NODES, "vxlan", every_end_up())))
    browser = Browser()
    try:
        browser.open(picture.as_uri())
        texts = browser.wait_for(
            "document.querySelectorAll('g.edge').length === 5 && "
            "Array.from(document.querySelectorAll('text')).map(t => t.textContent.trim())"
        )
        width = browser.evaluate("document.rootElement.getBBox().width")
    finally:
        browser.close()
    for name in ("node1", "node2", *PODS, *INTERFACES, "10.99.0.17/30", "veth", "vxlan"):
        assert name in texts
    assert width > 100


def test_a_hundred_pods_lay_out_in_two_dimensions() -> None:
    objects = []
    for index in range(100):
        peers = [(index + 1) % 100, (index - 1) % 100]
        links = [
            {
                "uid": min(index, p) * 100 + max(index, p),
                "peer_pod": f"p{p}",
                "local_intf": f"eth{n + 1}",
                "peer_intf": f"eth{2 - n}",
            }
            for n, p in enumerate(peers)
        ]
        objects.append(
            {
                "metadata": {"name": f"p{index}", "namespace": "default"},
                "spec": {"links": links},
                "status": {"src_ip": f"169.254.0.{11 + index % 4}"},
            }
        )
    graph = build("lab", objects, {}, "vxlan", [])

    svg = layout.svg(graph)

    assert layout.engine(graph) == "fdp"
    assert svg.count('class="node"') == 100 and svg.count('class="edge link') == 100
    width, height = (float(v) for v in svg.split('viewBox="')[1].split('"')[0].split()[2:])
    assert max(width, height) < 4 * min(width, height)


def test_the_command_refuses_an_unknown_extension() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "meshwire.tools.cli", "lab", "graph", "-o", "x.png"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2 and "the extension must be one of" in done.stderr
