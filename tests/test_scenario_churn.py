"""A lab under churn converges from events alone, over veth and vxlan and over the wire.

Runs bench/churn.py, small: pods restarted and moved between 3 nodes, links
taken out of the topology and put back, links' MTUs changed, daemons and the
API server killed, several at a time, with no pause for the lab to settle.
The daemons' full pass is set an hour away, so only the daemons' handling of
events (CNI ADD and DEL, topology changes, restarts, pruning) can bring the
lab back: afterwards every link must pass `lab check` (ARP both ways), every
link end must be done, nothing be left of a link taken out, every end have
its link's MTU, and for the wire every ready wire be held by a worker with
stream refcounts that match. The pass/fail bound on converging is
a hang guard far above what it takes, not a timing check.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from links_helpers import needs_root

pytestmark = [needs_root, pytest.mark.root, pytest.mark.timeout(900)]

CHURN = Path(__file__).resolve().parents[1] / "bench" / "churn.py"
MESHWIRE = [sys.executable, "-m", "meshwire.tools.cli"]
OPS = 120
CONFIGS = {
    "vxlan": "inter_node_link_type: vxlan\nreconcile: {full_interval: 3600}\n",
    "grpc": "inter_node_link_type: grpc\nworkers: 1\nreconcile: {full_interval: 3600}\n",
}


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_a_churned_lab_comes_back_whole_without_the_full_pass(tmp_path: Path, kind: str) -> None:
    name = "c" + secrets.token_hex(3)[:5]
    config, report = tmp_path / "config.yaml", tmp_path / "report.json"
    config.write_text(CONFIGS[kind])
    argv = [sys.executable, str(CHURN), "--pods", "30", "--chords", "30", "--nodes", "3"]
    argv += ["--ops", str(OPS), "--parallel", "8", "--settle", "300", "--seed", "7"]
    argv += ["--config", str(config), "--name", name, "--json", str(report)]
    try:
        run = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=800)
    finally:
        subprocess.run([*MESHWIRE, "lab", "down", "--name", name], capture_output=True, check=False)
    assert report.exists(), f"churn.py failed:\n{run.stderr[-3000:]}"
    result = json.loads(report.read_text())
    print(f"[measured] {kind}: {json.dumps(result)}")

    assert sum(result["ops"].values()) == OPS
    assert result["ops"]["mtu"] > 0 and result["ops"]["edit"] > 0
    assert result["failed_ops"] == []
    assert result["failing_links"] == []
    assert result["problems"] == []
    assert run.returncode == 0
