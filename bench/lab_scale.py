"""Lab scale benchmark: a generated 1,000-pod lab through `meshwire lab`, timed phase by phase.

    .venv/bin/python bench/lab_scale.py [--pods 1000] [--chords 1000] [--nodes 4]
        [--seed 1] [--config FILE] [--keep FILE] [--json FILE]

The lab: pods p0001..pN in a ring (p_i -- p_i+1) plus `--chords` links between
random pairs of distinct pods that are not linked yet, each link with a /30
from 10.200.0.0/16 (a end .1, b end .2), every link in both pods' Topology
objects as meshnet expects. Placement is `lab up`'s round robin, so on 4
nodes nearly every link is a vxlan and a quarter of the chords veths;
`--config examples/grpc.yaml` (the daemons' config) makes the cross-node
links gRPC wires instead.

It runs the real commands as a user would (`meshwire lab up`, `check`,
`down`, lab name `scale`) and times them from outside:

- `up`, split at its progress lines: hub and API, apply (its start: every
  Topology goes through the API in the background from here), nodes,
  daemons (started), pod namespaces, ready (until every daemon answers
  /readyz and the apply has ended), CNI ADDs (first to last answer; each ADD
  returns once its pod's links to running peers exist), and the final wait
  until every link end exists;
- per node, from its daemon's /metrics just after `up`: link operations and
  the seconds they took (`meshwire_reconcile_duration_seconds`), so the
  convergence work of each node is seen apart from the waiting;
- `check` (every link proven by ARP both ways) and `down`;
- the kernel's floor for the same lab, in the same run before `up`
  (`bench/lab_floor.py`: the same namespaces, veth pairs, vxlan devices and tc
  stitches made by `ip -batch` and `tc -batch`), and `up`'s total against it;
- the floor the daemons' status write cap puts under the CNI phase: each
  ADD answers only once its pod's placement is written to its Topology
  status, and a node writes at most `reconcile.status_rate` statuses a second
  (50 by default) after a burst of 100, so the busiest node's N pods need at
  least (N - 100) / rate seconds: 250 pods a node, 3 s. `status_cap` gives
  that floor and says when the CNI phase is bound by it.

Everything is named `mwlscale-` and `lab down` runs at the end even when a
step fails. Nothing touches the host's loopback.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from lab_floor import floor_of

from meshwire.base import hostport
from meshwire.control.model.topology import Link
from meshwire.control.reconcile.status_writer import DEFAULT_WRITE_BURST, DEFAULT_WRITE_RATE
from meshwire.tools.lab.daemons import read_base
from meshwire.tools.lab.probe import http_get
from meshwire.tools.lab.state import LabDir, LabState

NAME = "scale"
NET = ipaddress.ip_network("10.200.0.0/16")


def generate(pods: int, chords: int, seed: int) -> list[dict[str, Any]]:
    """The Topology objects of the ring-plus-chords lab."""
    rng = random.Random(seed)
    names = [f"p{i:04d}" for i in range(1, pods + 1)]
    pairs = [(names[i], names[(i + 1) % pods]) for i in range(pods)]
    linked = {frozenset(p) for p in pairs}
    while len(pairs) < pods + chords:
        a, b = rng.sample(names, 2)
        if frozenset((a, b)) not in linked:
            linked.add(frozenset((a, b)))
            pairs.append((a, b))
    if len(pairs) * 4 > NET.num_addresses:
        raise SystemExit(f"{len(pairs)} links do not fit {NET} with a /30 each")
    links: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for uid, (a, b) in enumerate(pairs, start=1):
        base = NET.network_address + 4 * (uid - 1)
        a_ip, b_ip = f"{base + 1}/30", f"{base + 2}/30"
        a_intf, b_intf = f"eth{len(links[a]) + 1}", f"eth{len(links[b]) + 1}"
        links[a].append(Link(uid, b, a_intf, b_intf, a_ip, b_ip).to_dict())
        links[b].append(Link(uid, a, b_intf, a_intf, b_ip, a_ip).to_dict())
    return [
        {
            "apiVersion": "networkop.co.uk/v1beta1",
            "kind": "Topology",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"links": links[name]},
        }
        for name in names
    ]


def meshwire(*args: str) -> list[str]:
    return [sys.executable, "-m", "meshwire.tools.cli", "lab", *args, "--name", NAME]


def run_up(file: Path, nodes: int, config: Path | None) -> list[tuple[float, str]]:
    """Run `lab up`, returning (seconds since start, line) for each line it prints."""
    start = time.monotonic()
    argv = meshwire("up", str(file), "--nodes", str(nodes), "--wait", "900")
    if config is not None:
        argv += ["--config", str(config)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines = [(time.monotonic() - start, line.rstrip()) for line in proc.stdout]
    if proc.wait() != 0:
        tail = "\n".join(line for _, line in lines[-5:])
        raise SystemExit(f"lab up failed (exit {proc.returncode}):\n{tail}")
    return lines


# Phases of `up` by the progress line that starts them (the first match wins).
PHASES = [
    ("hub", re.compile(r"hub ")),
    ("api", re.compile(r"embedded API")),
    ("apply", re.compile(r"apply topology")),
    ("nodes", re.compile(r"node node")),
    ("daemons", re.compile(r"daemon on ")),
    ("netns", re.compile(r"\d+ pod namespaces")),
    ("ready", re.compile(r"daemons ready")),
    ("cni", re.compile(r"pod \S+ on node")),
    ("links", re.compile(r"links$")),
]


def phases(lines: list[tuple[float, str]]) -> dict[str, float]:
    """Seconds per phase of `up`, from the times its progress lines appeared."""
    marks: dict[str, float] = {}
    for t, line in lines:
        text = line.split("] ", 1)[-1]
        for key, pattern in PHASES:
            if pattern.match(text):
                marks.setdefault(key, t)
                break
    present = [key for key, _ in PHASES if key in marks]
    end = lines[-1][0]
    out = {
        here: (marks[after] if after else end) - marks[here]
        for here, after in zip(present, [*present[1:], None], strict=True)
    }
    out["total"] = end
    return out


def daemon_metrics(state: LabState) -> dict[str, dict[str, float]]:
    """Each node's daemon /metrics: sample (name with labels) -> value; {} if it does not answer."""
    out = {}
    for node in state.nodes.values():
        host, port = hostport.split(node.metrics)
        answer = http_get(host, port, "/metrics", netns=node.netns, timeout=10)
        samples = {}
        for line in (answer[1] if answer else "").splitlines():
            if line.startswith("meshwire_") and " " in line:
                name, value = line.rsplit(" ", 1)
                samples[name] = float(value)
        out[node.name] = samples
    return out


def node_metrics() -> dict[str, dict[str, float]]:
    """Per node: link operations done and the seconds they took, from the daemon's /metrics."""
    out = {}
    for node, samples in daemon_metrics(LabDir.locate(NAME, None).load()).items():
        values: dict[str, float] = {}
        for name, value in samples.items():
            if name == 'meshwire_reconcile_duration_seconds_sum{op="update"}':
                values["update_seconds"] = value
            elif name == 'meshwire_reconcile_duration_seconds_count{op="update"}':
                values["updates"] = value
            elif name.startswith("meshwire_links{"):
                values[name.split("{", 1)[1].removesuffix("}")] = value
        out[node] = values
    return out


def status_cap(up: dict[str, float], config: Path | None) -> dict[str, Any]:
    """The floor the status write cap puts under the CNI phase (one placement write per
    pod, per node), and whether the measured phase sits on it."""
    state = LabDir.locate(NAME, None).load()
    per_node: dict[str, int] = {}
    for pod in state.pods.values():
        per_node[pod.node] = per_node.get(pod.node, 0) + 1
    busiest = max(per_node.values(), default=0)
    rate = float(read_base(config).get("reconcile", {}).get("status_rate", DEFAULT_WRITE_RATE))
    floor = max(0, busiest - DEFAULT_WRITE_BURST) / rate
    cni = up.get("cni", 0.0)
    result: dict[str, Any] = {
        "status_rate": rate,
        "burst": DEFAULT_WRITE_BURST,
        "pods_busiest_node": busiest,
        "cni_floor_seconds": round(floor, 2),
        "bound_by_status_rate": floor > 0 and cni < floor * 1.2,
    }
    if result["bound_by_status_rate"]:
        result["note"] = (
            f"the CNI phase ({cni:.1f} s) sits on the status write cap: {busiest} pods on "
            f"one node at {rate:g} writes/s after a burst of {DEFAULT_WRITE_BURST} take "
            f"at least {floor:.1f} s (reconcile.status_rate in --config moves it)"
        )
    return result


def timed(argv: list[str]) -> tuple[float, str]:
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return time.monotonic() - start, (done.stdout.strip().splitlines() or [""])[-1]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--chords", type=int, default=1000, help="random links besides the ring")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--config", type=Path, help="the daemons' config (lab up --config)")
    parser.add_argument("--keep", type=Path, help="also write the generated lab file here")
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    args = parser.parse_args(argv)

    topologies = generate(args.pods, args.chords, args.seed)
    text = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": topologies})
    if args.keep:
        args.keep.write_text(text)
    report: dict[str, Any] = {"pods": args.pods, "links": args.pods + args.chords}
    report["kernel_floor"] = floor_of(topologies, args.nodes)
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "scale.yml"
        file.write_text(text)
        try:
            report["up"] = phases(run_up(file, args.nodes, args.config))
            report["up_over_floor"] = round(
                report["up"]["total"] / report["kernel_floor"]["floor_s"], 2
            )
            report["status_cap"] = status_cap(report["up"], args.config)
            report["nodes"] = node_metrics()
            report["check_seconds"], report["check"] = timed(meshwire("check"))
        finally:
            report["down_seconds"], _ = timed(meshwire("down"))
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if report["check"].startswith(f"{report['links']}/{report['links']} links ok") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
