"""`meshwire lab graph --serve` and `meshwire graph --kubeconfig` on a running lab.

One lab (examples/lab.yml on 2 simulated nodes, the real API, daemons and
CNI shim) and one headless Chromium serve every test here, in file order:
the page shows every pod and link, follows a link's carrier going down and
up, shows a clicked link's ends and counters, and drops a link taken out of
the topology with `meshwire apply`; the cluster command draws the lab from
its Topology objects through a kubeconfig pointing at the embedded API.
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from browser_helpers import Browser

from meshwire.tools.lab import command
from meshwire.tools.lab.state import LabDir, LabState
from tests.kubeconfigs import write_kubeconfig
from tests.paths import REPO

pytestmark = pytest.mark.root

PODS = ["default/r1", "default/r2", "default/r3", "default/r4"]
LINKS = ["default/1", "default/2", "default/3", "default/4", "default/5"]
WAIT = 30.0


@dataclass
class LiveLab:
    name: str
    directory: Path
    state: LabState
    url: str
    browser: Browser

    def meshwire(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "meshwire.tools.cli", *args]
        return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)

    def link_states(self) -> str:
        return (
            "JSON.stringify(Object.fromEntries(Array.from(document.querySelectorAll"
            "('#picture g.edge')).map(e => [e.id, e.dataset.state])))"
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveLab]:
    name = "g" + secrets.token_hex(3)[:5]
    directory = tmp_path_factory.mktemp("graph") / name
    where = ["--name", name, "--dir", str(directory)]
    server: subprocess.Popen[str] | None = None
    browser: Browser | None = None
    try:
        lab_file = str(REPO / "examples/lab.yml")
        assert command.main(["up", lab_file, "--nodes", "2", "--wait", "60", *where]) == 0
        port = free_port()
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "meshwire.tools.cli",
                "lab",
                "graph",
                *where,
                "--serve",
                f"127.0.0.1:{port}",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        assert url == f"http://127.0.0.1:{port}/"
        browser = Browser()
        browser.open(url)
        yield LiveLab(name, directory, LabDir(directory).load(), url, browser)
    finally:
        # Each step even if one before it fails: the lab must go whatever happens.
        try:
            if browser is not None:
                browser.close()
        finally:
            try:
                if server is not None:
                    server.kill()
                    server.wait(timeout=30)
            finally:
                command.main(["down", *where])


def test_the_page_shows_every_pod_and_every_link_up(lab: LiveLab) -> None:
    states = lab.browser.wait_for(
        f"(s => Object.keys(s).length === 5 && Object.values(s).every(v => v === 'up') && s)"
        f"(JSON.parse({lab.link_states()}))",
        WAIT,
    )
    assert sorted(states) == [f"link:{link}" for link in LINKS]
    pods = lab.browser.evaluate(
        "Array.from(document.querySelectorAll('#picture g.node')).map(n => n.id)"
    )
    assert sorted(pods) == [f"pod:{pod}" for pod in PODS]
    nodes = lab.browser.evaluate(
        "Array.from(document.querySelectorAll('#picture g.cluster')).map(n => n.id)"
    )
    assert sorted(nodes) == ["node:node1", "node:node2"]
    assets = lab.browser.evaluate("performance.getEntriesByType('resource').map(r => r.name)")
    assert all(a.startswith(lab.url) for a in assets), assets


def test_a_link_going_down_and_up_shows_on_the_page_without_a_reload(lab: LiveLab) -> None:
    netns = lab.state.pods["default/r1"].netns
    lab.browser.evaluate("window.sameDocument = true")
    edge = "document.getElementById('link:default/1').dataset.state"
    lab.browser.wait_for(f"{edge} === 'up'", WAIT)
    subprocess.run(["ip", "-n", netns, "link", "set", "eth1", "down"], check=True)
    try:
        lab.browser.wait_for(f"{edge} === 'down'", WAIT)
        row = "document.getElementById('row:default/1').dataset.state"
        assert lab.browser.evaluate(row) == "down"
    finally:
        subprocess.run(["ip", "-n", netns, "link", "set", "eth1", "up"], check=True)
    lab.browser.wait_for(f"{edge} === 'up'", WAIT)
    assert lab.browser.evaluate("window.sameDocument") is True


def test_clicking_a_link_shows_its_ends_kind_and_counters(lab: LiveLab) -> None:
    # Once the link is drawn (a drawing being swapped in has it for a moment not).
    lab.browser.wait_for(
        "(e => e !== null && e.dispatchEvent(new MouseEvent('click', {bubbles: true})))"
        "(document.getElementById('link:default/5'))",
        WAIT,
    )
    details = lab.browser.wait_for(
        "(t => t.includes('rx_packets') && t)(document.getElementById('details').innerText)",
        WAIT,
    )
    assert "link default/5 (veth): up" in details
    assert "default/r1:eth3" in details and "default/r3:eth3" in details
    assert "10.99.0.17/30" in details and "MAC" in details


def test_graph_on_a_cluster_draws_the_namespace_from_its_topologies(
    lab: LiveLab, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig", lab.state.host_url, token=lab.state.token()
    )
    out = tmp_path / "lab.json"

    done = lab.meshwire("graph", "--kubeconfig", str(kubeconfig), "-n", "default", "-o", str(out))

    assert done.returncode == 0, done.stderr
    graph = json.loads(out.read_text())
    node_ips = sorted(node.ip for node in lab.state.nodes.values())
    assert list(graph["nodes"]) == node_ips
    assert {p["id"]: p["node"] for p in graph["pods"]} == {
        key: lab.state.nodes[pod.node].ip for key, pod in lab.state.pods.items()
    }
    assert {k["id"]: k["state"] for k in graph["links"]} == dict.fromkeys(LINKS, "placed")
    svg = tmp_path / "lab.svg"
    done = lab.meshwire("graph", "--kubeconfig", str(kubeconfig), "-o", str(svg))
    assert done.returncode == 0, done.stderr
    assert all(f">{pod}<" in svg.read_text() for pod in PODS)


def test_a_link_taken_out_with_apply_leaves_the_page(lab: LiveLab, tmp_path: Path) -> None:
    objects = yaml.safe_load((REPO / "examples/lab.yml").read_text())
    for obj in objects["items"]:
        obj["spec"]["links"] = [e for e in obj["spec"]["links"] if e["uid"] != 5]
    edited = tmp_path / "edited.yml"
    edited.write_text(yaml.safe_dump(objects))
    lab.browser.wait_for("document.getElementById('link:default/5') !== null", WAIT)

    token = ("--token-file", str(LabDir(lab.directory).token_file))
    done = lab.meshwire("apply", "-f", str(edited), "--server", lab.state.host_url, *token)

    assert done.returncode == 0, done.stderr
    lab.browser.wait_for("document.getElementById('link:default/5') === null", WAIT)
    links = json.loads(lab.browser.evaluate(lab.link_states()))
    assert sorted(links) == [f"link:{link}" for link in LINKS if link != "default/5"]
    assert lab.browser.evaluate("document.getElementById('row:default/5')") is None


def test_a_pulled_cable_shows_as_pulled_and_plugged_back_as_up(lab: LiveLab) -> None:
    where = ["--name", lab.name, "--dir", str(lab.directory)]
    edge = "document.getElementById('link:default/1').dataset.state"
    lab.browser.wait_for(f"{edge} === 'up'", WAIT)
    pulled = lab.meshwire("lab", "link", "r1:eth1", "down", *where)
    assert pulled.returncode == 0, pulled.stderr
    try:
        lab.browser.wait_for(f"{edge} === 'pulled'", WAIT)
    finally:
        plugged = lab.meshwire("lab", "link", "r1:eth1", "up", *where)
        assert plugged.returncode == 0, plugged.stderr
    lab.browser.wait_for(f"{edge} === 'up'", WAIT)
