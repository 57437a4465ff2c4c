"""Acceptance of `meshwire lab` (#4): meshnet's own test topologies and the example lab files.

Every file of meshnet's test suite comes up on one and on two simulated nodes
(vxlan between them) with the real API, daemons and CNI shim, `lab check`
passes, and `lab down` leaves nothing. The two 1,500-link files are marked
`scale`: they run in the default suite on one node count each (about a
minute and a half per run on 2 cores, most of it the kernel moving 3,000
interfaces between namespaces); `-m scale` selects them alone.

The example lab in three formats (meshnet, containerlab, KNE) wires the same
links: same pods, interfaces and kinds.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab_helpers import Lab, host_link_names, host_netns_names, pid_alive, unique_lab

from tests.paths import MESHNET

pytestmark = pytest.mark.root

FIXTURES = MESHNET
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SMALL = ["2node.yml", "3node.yml", "3node-mlink.yml", "5node.yml", "2node-sts.yml", "macvlan.yml"]
# One node count each in the default run: both counts of both files take ~8 minutes.
SCALE = [("2node-1500links.yml", 1), ("2node-1500links-multinode.yml", 2)]
RESULT = re.compile(r"^(ok  |FAIL|skip) (\S+) (\S+) (\S+) (.*)$")


def up_check_down(
    lab: Lab, file: Path, nodes: int, capsys: pytest.CaptureFixture[str]
) -> dict[str, tuple[str, str, str]]:
    """`lab up FILE --nodes N`, `lab check` (must pass), `lab down` (must leave nothing).

    Returns each link's (verdict, kind, method) from `check`, by `ns/uid`.
    """
    assert lab.run("up", str(file), "--nodes", str(nodes), "--wait", "280") == 0, (
        capsys.readouterr().err
    )
    pids = [p["pid"] for p in json.loads((lab.directory / "state.json").read_text())["processes"]]
    capsys.readouterr()
    rc = lab.run("check")
    out = capsys.readouterr().out
    failed = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert (rc, failed[:5]) == (0, [])
    results = {}
    for line in out.splitlines()[:-1]:
        match = RESULT.match(line)
        assert match, line
        verdict, link, kind, method, _ = match.groups()
        results[link] = (verdict.strip(), kind, method)

    assert lab.run("down") == 0
    assert host_netns_names(lab.prefix) == []
    assert host_link_names(lab.prefix) == []
    assert [pid for pid in pids if pid_alive(pid)] == []
    assert not lab.directory.exists()
    return results


@pytest.mark.parametrize("nodes", [1, 2])
@pytest.mark.parametrize("name", SMALL)
def test_meshnet_fixture_comes_up_checks_and_goes(
    name: str, nodes: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with unique_lab(tmp_path) as lab:
        results = up_check_down(lab, FIXTURES / name, nodes, capsys)

    inter_node = "veth" if nodes == 1 else "vxlan"
    kinds = {kind for _, kind, _ in results.values()}
    assert kinds <= {"veth", inter_node, "macvlan", "none"}
    if name == "2node.yml":
        # r3 links to r4, which has a Pod but no Topology: nothing wires it, and check says so.
        assert results["default/2"] == ("skip", "none", "skip")
    if name == "macvlan.yml":
        # r2's eth2 is a macvlan on its node's eth0, proven by frames over the underlay.
        assert results["default/2"] == ("ok", "macvlan", "frame")
    if name == "2node-sts.yml":
        assert results["default/1"] == ("ok", inter_node, "arp")


@pytest.mark.scale
@pytest.mark.timeout(600)
@pytest.mark.parametrize(("name", "nodes"), SCALE)
def test_meshnet_1500_link_fixture_comes_up_checks_and_goes(
    name: str, nodes: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with unique_lab(tmp_path) as lab:
        results = up_check_down(lab, FIXTURES / name, nodes, capsys)

    kind = "veth" if nodes == 1 else "vxlan"
    assert len(results) == 1500
    assert set(results.values()) == {("ok", kind, "arp")}


@pytest.fixture(autouse=True)
def _neighbour_table_drained() -> Iterator[None]:
    """After a lab, until the kernel has freed its neighbour entries (bounded).

    The ARP table is one for the whole machine (gc_thresh3: 1024 entries by
    default) and a 1,500-link check fills most of it; the namespaces `lab down`
    deleted are cleaned up by the kernel in the background, and their entries
    go with them. A test that starts before that meets a full table (ENOBUFS).
    """
    yield
    deadline = time.monotonic() + 60
    while arp_entries() > ARP_SETTLED and time.monotonic() < deadline:
        time.sleep(0.5)


# Below this (the kernel's gc_thresh2 default) the table has room for any other test.
ARP_SETTLED = 512


def arp_entries() -> int:
    """Entries in the machine's ARP table (/proc/net/stat/arp_cache: first column, hex)."""
    return int(Path("/proc/net/stat/arp_cache").read_text().splitlines()[1].split()[0], 16)
