"""Reconcile benchmark on one node: converging 1,500 veths, and a peer's ADD to its links up.

    .venv/bin/python bench/reconcile_bench.py [--converge-file FILE] [--restarts 100]
        [--restart-file FILE] [--pod NAME] [--skip-converge] [--skip-restarts]

Both parts run through `meshwire lab` with one simulated node (the embedded
API, a real daemon in the node's netns, the real CNI shim, pods as network
namespaces); everything is named `mwlb<hex>-` and `lab down` removes it, even
when the bench fails. Nothing touches the host's loopback.

1. Converge (default meshnet's 2node-1500links.yml: 1,500 links between two
   pods, so 1,500 veth pairs): the lab comes up without a daemon, both pods'
   Topology status is set as their CNI ADD would have (src_ip, net_ns), then
   the daemon starts. Measured from the daemon's spawn: until /readyz says
   ready (informer synced and every row attempted once), and until all 3,000
   ends exist and are up in the kernel (polled by one netlink dump per pod).
2. Restarts (default 3node.yml, pod r3, 100 times): CNI DEL, a new netns, CNI
   ADD with a new container id, as `lab restart-pod` does. Measured per
   restart: from the ADD's exec until both ends of every link of the pod are
   up (the ADD itself waits for them, so this includes the shim's exec and
   the ADD's own wait). Reported as p50/p99/max.
"""

from __future__ import annotations

import argparse
import io
import json
import secrets
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubernetes import client
from pyroute2 import IPRoute

from meshwire.control.lab import netns, pods
from meshwire.control.lab.down import down
from meshwire.control.lab.links import lab_links, topologies_of
from meshwire.control.lab.names import LabNames, netns_path
from meshwire.control.lab.probe import http_get
from meshwire.control.lab.progress import LineProgress
from meshwire.control.lab.runtime import MeshwireRuntime
from meshwire.control.lab.state import LabDir, LabState
from meshwire.control.lab.up import UpOptions, start_daemon, up
from meshwire.control.model.topology import API_VERSION, GROUP, PLURAL, VERSION

# meshnet's test topologies, shipped with the suite (tests/data/meshnet).
FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "data" / "meshnet"
NODE = "node1"
# Restarts: links up is polled every 5 ms (2 namespaces, a few interfaces).
POLL = 0.005
# Converge: one dump of 1,500 interfaces per pod costs CPU the daemon needs on
# a small machine, so the kernel is read every 250 ms (the figure's resolution).
CONVERGE_POLL = 0.25
TIMEOUT = 600.0
IFF_UP = 0x1


@contextmanager
def lab_of(file: Path, with_daemons: bool) -> Iterator[tuple[LabDir, LabNames, LabState]]:
    name = "b" + secrets.token_hex(3)[:5]
    names = LabNames(name)
    lab = LabDir.locate(name, None)
    options = UpOptions(file, nodes=1, name=name, wait=TIMEOUT)
    try:
        state = up(options, MeshwireRuntime(with_daemons=with_daemons), LineProgress(io.StringIO()))
        yield lab, names, state
    finally:
        down(lab, names)


def up_ends(ns: str) -> set[str]:
    """Names of the interfaces in netns `ns` that are up with carrier."""

    def read() -> set[str]:
        with IPRoute() as ipr:
            return {
                msg.get_attr("IFLA_IFNAME")
                for msg in ipr.get_links()
                if msg["flags"] & IFF_UP and msg.get_attr("IFLA_OPERSTATE") == "UP"
            }

    try:
        return netns.in_netns(ns, read)
    except FileNotFoundError:
        return set()


def wait(condition: Callable[[], bool], what: str, poll: float = POLL) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"reconcile bench: {what} not reached in {TIMEOUT:.0f}s")
        time.sleep(poll)


def wanted_ends(state: LabState, names: LabNames) -> dict[str, set[str]]:
    """pod netns -> the interface names its links need."""
    placement = {key: pod.node for key, pod in state.pods.items()}
    out: dict[str, set[str]] = {}
    for link in lab_links(topologies_of(state.topologies), placement, "vxlan"):
        for end in (link.a, link.b):
            namespace, _, pod = end.pod.partition("/")
            out.setdefault(names.pod_netns(namespace, pod), set()).add(end.intf)
    return out


def place_pods(state: LabState, names: LabNames) -> None:
    """Write each pod's status as its CNI ADD would (src_ip, net_ns), from inside the hub."""
    ip = state.nodes[NODE].ip

    def patch() -> None:
        api = client.CustomObjectsApi(client.ApiClient(client.Configuration(host=state.api_url)))
        for pod in state.pods.values():
            body = {"status": {"src_ip": ip, "net_ns": netns_path(pod.netns)}}
            api.patch_namespaced_custom_object_status(
                GROUP, VERSION, pod.namespace, PLURAL, pod.name, body
            )

    netns.in_netns(names.hub_netns, patch)


def converge(file: Path) -> dict[str, Any]:
    with lab_of(file, with_daemons=False) as (lab, names, state):
        wanted = wanted_ends(state, names)
        place_pods(state, names)
        metrics = state.nodes[NODE].metrics
        host, _, port = metrics.rpartition(":")
        started = time.monotonic()
        start_daemon(lab, state, MeshwireRuntime(), NODE)

        def ready() -> bool:
            answer = http_get(host, int(port), "/readyz", netns=names.node_netns(NODE))
            return answer is not None and answer[0] == 200

        def all_up() -> bool:
            return all(ends <= up_ends(ns) for ns, ends in wanted.items())

        wait(ready, "daemon ready", CONVERGE_POLL)
        ready_s = time.monotonic() - started
        wait(all_up, "every end up", CONVERGE_POLL)
        up_s = time.monotonic() - started
        return {
            "file": file.name,
            "veth_pairs": sum(len(e) for e in wanted.values()) // 2,
            "ready_s": round(ready_s, 3),
            "all_up_s": round(up_s, 3),
        }


def restarts(file: Path, pod_name: str, count: int) -> dict[str, Any]:
    with lab_of(file, with_daemons=True) as (lab, names, state):
        shim = MeshwireRuntime().cni_argv()
        record = state.pod(pod_name)
        placement = {key: pod.node for key, pod in state.pods.items()}
        ends: dict[str, set[str]] = {}
        for link in lab_links(topologies_of(state.topologies), placement, "vxlan"):
            if record.key in (link.a.pod, link.b.pod):
                for end in (link.a, link.b):
                    namespace, _, pod = end.pod.partition("/")
                    ends.setdefault(names.pod_netns(namespace, pod), set()).add(end.intf)
        samples, adds = [], []
        for _ in range(count):
            pods.detach(lab, state, record, shim)
            pods.recreate_netns(lab, state, record)
            started = time.monotonic()
            pods.attach(lab, state, record, shim)
            adds.append(time.monotonic() - started)
            wait(lambda: all(e <= up_ends(ns) for ns, e in ends.items()), "links up")
            samples.append(time.monotonic() - started)
        return {
            "file": file.name,
            "pod": record.key,
            "links": sum(len(e) for e in ends.values()) // 2,
            "restarts": count,
            "links_up_ms": percentiles(samples),
            "add_returned_ms": percentiles(adds),
        }


def percentiles(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return {
        "p50": round(statistics.median(ms), 1),
        "p99": round(p99, 1),
        "max": round(ms[-1], 1),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--converge-file", type=Path, default=FIXTURES / "2node-1500links.yml")
    parser.add_argument("--restart-file", type=Path, default=FIXTURES / "3node.yml")
    parser.add_argument("--pod", default="r3", help="the pod restarted (default: r3)")
    parser.add_argument("--restarts", type=int, default=100)
    parser.add_argument("--skip-converge", action="store_true")
    parser.add_argument("--skip-restarts", action="store_true")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"api": API_VERSION}
    if not args.skip_converge:
        results["converge"] = converge(args.converge_file)
        print(json.dumps(results["converge"]), flush=True)
    if not args.skip_restarts:
        results["restart"] = restarts(args.restart_file, args.pod, args.restarts)
        print(json.dumps(results["restart"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
