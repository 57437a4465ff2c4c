"""Reconcile benchmark on one node: converging 1,500 veths against the kernel's own
floor, and a peer's ADD to its links up, split into its parts.

    .venv/bin/python bench/reconcile_bench.py [--converge-file FILE] [--runs 1]
        [--restarts 100] [--restart-file FILE] [--pod NAME]
        [--skip-converge] [--skip-floor] [--skip-restarts] [--config FILE]

Both parts run through `meshwire lab` with one simulated node (the embedded
API, a real daemon in the node's netns, the real CNI shim, pods as network
namespaces); everything is named `mwlb<hex>-` (the floor's namespaces
`mwfl<hex>-`) and removed, even when the bench fails. Nothing touches the
host's loopback.

1. Converge (default meshnet's 2node-1500links.yml: 1,500 links between two
   pods, so 1,500 veth pairs), twice, each in a lab of its own:
   - Placed into a running daemon, as on a node whose daemon is up when a
     lab's pods start: the daemon starts and is ready with no links, then
     both pods are ADDed through the CNI shim at once (the daemon builds
     only where its node's CNI put a pod). Measured from the ADDs' start
     until all 3,000 ends are up (IFF_UP) and addressed (`configured_s`;
     every 50 ms an address dump per pod, and once every end has an
     address, a link dump): the work `ip -batch` has done when it returns.
   - A cold start: the pods' sandboxes are recorded in the node's sandbox
     store and their statuses set first, as a restarted daemon finds them,
     then the daemon starts. Measured from its spawn (interpreter start and
     imports included): until /readyz says ready (informer synced and every
     row attempted once, `ready_s`), and until all 3,000 ends are up with
     carrier (`all_up_s`).
   In the same run, the kernel's floor for as many pairs (`kernel_floor.py`:
   two `ip -batch` runs, every end addressed and up) and the ratios
   `configured_s / floor_batch_s` (`ratio_to_batch`: until the `ip` runs
   returned), `ready_s / floor_batch_s` (`cold_ratio_to_batch`) and
   `all_up_s / floor_s` (`ratio`: both until every end has carrier, which
   the kernel's linkwatch sets a while later); and the floor of the links as
   meshwire makes them (`kernel_floor.measure_stitched`: two veth pairs per
   link stitched with tc in a node netns) with `configured_s /
   floor_stitched_batch_s` (`ratio_to_stitched_batch`). With `--runs N` each
   figure is also given as the median of N runs.
2. Restarts (default 3node.yml, pod r3, 100 times): CNI DEL, a new netns, CNI
   ADD with a new container id, as `lab restart-pod` does. Measured per
   restart: from the ADD's exec until both ends of every link of the pod are
   up (the ADD itself waits for them), and that time's parts: the daemon's
   own (its `CNI ADD ... timings` log line: queue, netlink, noticed, status),
   the shim's (exec to answer, minus the daemon's part) and the bench's own
   look at the kernel after the ADD returned (`seen`, a GETLINK per end
   every 1 ms).
   Each reported as p50/p99/max. `status_writes` counts the API's Topology
   writes during the restarts and says whether they ran into the daemon's
   status write cap (`reconcile.status_rate` after its burst): an ADD answers
   once its placement is written, so back-to-back restarts (two writes each,
   the DEL's and the ADD's) are then paced by that cap, not by the restart
   path; `--config` gives the daemon another (`--skip-converge` runs only
   this part).
"""

from __future__ import annotations

import argparse
import io
import json
import re
import secrets
import socket
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import kernel_floor  # the sibling script: run as a script, bench/ is on sys.path
from kubernetes import client
from pyroute2.netlink.exceptions import NetlinkError

from meshwire.control.auth import token as tokens
from meshwire.control.common.config import load_config
from meshwire.control.daemon.cni_handler import ADD_TIMINGS
from meshwire.control.daemon.sandbox_store import Sandbox, SandboxStore
from meshwire.control.links import rtnl
from meshwire.control.links.netns import NetnsGone, NotANetns, identity_of, open_netns, socket_in
from meshwire.control.model.topology import API_VERSION, GROUP, PLURAL, VERSION
from meshwire.control.reconcile.status_writer import DEFAULT_WRITE_BURST, DEFAULT_WRITE_RATE
from meshwire.tools.lab import netns, pods
from meshwire.tools.lab.daemons import read_base
from meshwire.tools.lab.down import down
from meshwire.tools.lab.lab_names import LabNames, netns_path
from meshwire.tools.lab.links import lab_links, topologies_of
from meshwire.tools.lab.probe import http_get
from meshwire.tools.lab.progress import LineProgress
from meshwire.tools.lab.runtime import MeshwireRuntime
from meshwire.tools.lab.state import LabDir, LabState, PodRecord
from meshwire.tools.lab.up import UpOptions, start_daemon, up, wait_ready

# meshnet's test topologies, shipped with the suite (tests/data/meshnet).
FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "data" / "meshnet"
NODE = "node1"
# Restarts: links up is polled every 1 ms (a GETLINK per end, `EndWatch`).
RESTART_POLL = 0.001
# Converge: one raw dump of 1,500 interfaces per pod (kernel_floor.up_names)
# every 50 ms: a few ms of CPU each, the figure's resolution.
CONVERGE_POLL = 0.05
TIMEOUT = 600.0
# One part of the daemon's ADD_TIMINGS line.
PART = re.compile(r"(\w+_ms)=([0-9.]+)")


@contextmanager
def lab_of(
    file: Path,
    with_daemons: bool,
    config: Path | None = None,
    runtime: MeshwireRuntime | None = None,
) -> Iterator[tuple[LabDir, LabNames, LabState]]:
    """A one-node lab of `file`, removed on the way out; `runtime` (default meshwire's
    own) must have `with_daemons` as given."""
    name = "b" + secrets.token_hex(3)[:5]
    names = LabNames(name)
    lab = LabDir.locate(name, None)
    options = UpOptions(file, nodes=1, name=name, wait=TIMEOUT, config=config)
    try:
        chosen = runtime or MeshwireRuntime(with_daemons=with_daemons)
        state = up(options, chosen, LineProgress(io.StringIO()))
        yield lab, names, state
    finally:
        down(lab, names)


def up_ends(ns: str) -> set[str]:
    """Names of the interfaces in netns `ns` that are up with carrier."""
    try:
        return kernel_floor.up_names(ns)
    except (NetnsGone, NotANetns):
        return set()


def wait(condition: Callable[[], bool], what: str, poll: float) -> None:
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


def api_client(state: LabState) -> Any:
    """The lab API's CustomObjectsApi, presenting the lab's token (from inside the hub)."""
    configuration = client.Configuration(host=state.api_url)
    configuration.api_key["BearerToken"] = tokens.header(state.token())
    return client.CustomObjectsApi(client.ApiClient(configuration))


def add_pods(lab: LabDir, state: LabState) -> None:
    """CNI ADD every pod through the shim, all at once, as a runtime starting them does:
    the daemon builds links only in namespaces its node's CNI handed it."""
    records = list(state.pods.values())
    pods.attach_all(lab, state, records, MeshwireRuntime().cni_argv(), lambda _: None)


def restore_pods(state: LabState, names: LabNames) -> None:
    """What a daemon restarted over running pods finds: each pod's sandbox in the node's
    sandbox store (as its CNI ADD recorded it), and its status as the ADD wrote it."""
    ip = state.nodes[NODE].ip
    store = SandboxStore(Path(load_config(Path(state.nodes[NODE].config), env={}).cni.state_dir))
    for pod in state.pods.values():
        pod.container_id = pods.new_container_id()
        path = netns_path(pod.netns)
        store.save(pod.key, Sandbox(pod.container_id, path, "", identity_of(path)))

    def patch() -> None:
        api = api_client(state)
        for pod in state.pods.values():
            placement = {"src_ip": ip, "net_ns": netns_path(pod.netns)}
            body = {"status": {**placement, "container_id": pod.container_id}}
            api.patch_namespaced_custom_object_status(
                GROUP, VERSION, pod.namespace, PLURAL, pod.name, body
            )

    netns.in_netns(names.hub_netns, patch)


def floor(pairs: int) -> dict[str, float]:
    """The kernel's floors for `pairs` links (`kernel_floor.py`), in fresh namespaces: one
    veth pair each, and two stitched veth pairs each, as meshwire makes them."""
    batch_s, up_s = kernel_floor.measure(pairs, f"mwfl{secrets.token_hex(3)}-")
    stitched_s, stitched_up_s = kernel_floor.measure_stitched(pairs, f"mwfl{secrets.token_hex(3)}-")
    return {
        "floor_batch_s": round(batch_s, 3),
        "floor_s": round(up_s, 3),
        "floor_stitched_batch_s": round(stitched_s, 3),
        "floor_stitched_s": round(stitched_up_s, 3),
    }


def converge_with_floor(file: Path, runs: int, with_floor: bool) -> dict[str, Any]:
    """`runs` converges, each followed by the floor for as many pairs; medians if runs > 1."""
    results = []
    for _ in range(runs):
        result = converge(file)
        if with_floor:
            result.update(floor(result["veth_pairs"]))
            result["ratio_to_batch"] = round(result["configured_s"] / result["floor_batch_s"], 2)
            result["ratio_to_stitched_batch"] = round(
                result["configured_s"] / result["floor_stitched_batch_s"], 2
            )
            result["cold_ratio_to_batch"] = round(result["ready_s"] / result["floor_batch_s"], 2)
            result["ratio"] = round(result["all_up_s"] / result["floor_s"], 2)
        print(json.dumps(result), flush=True)
        results.append(result)
    if runs == 1:
        return results[0]
    numbers = [k for k, v in results[0].items() if isinstance(v, float)]
    return {
        "file": file.name,
        "veth_pairs": results[0]["veth_pairs"],
        "runs": runs,
        "median": {k: round(statistics.median(r[k] for r in results), 3) for k in numbers},
    }


def converge(file: Path) -> dict[str, Any]:
    """Both converges of `file` (see the module doc), one lab each."""
    return {"file": file.name, **placed(file), **cold_start(file)}


def placed(file: Path) -> dict[str, Any]:
    """Seconds from the pods' placement, written with the daemon running and ready,
    until every end is up and addressed."""
    with lab_of(file, with_daemons=False) as (lab, names, state):
        wanted = wanted_ends(state, names)
        start_daemon(lab, state, MeshwireRuntime(), NODE)
        wait_ready(state, NODE)
        started = time.monotonic()
        add_pods(lab, state)

        def configured() -> bool:
            # The cheap look first: every end addressed (meshwire raises an end
            # before it addresses it), then the exact one.
            if any(addressed(ns) < len(ends) for ns, ends in wanted.items()):
                return False
            return all(ends <= configured_ends(ns) for ns, ends in wanted.items())

        wait(configured, "every end up and addressed", CONVERGE_POLL)
        return {
            "veth_pairs": sum(len(e) for e in wanted.values()) // 2,
            "configured_s": round(time.monotonic() - started, 3),
        }


def addressed(ns: str) -> int:
    """How many interfaces in netns `ns` have an address."""
    try:
        return kernel_floor.addressed_count(ns)
    except (NetnsGone, NotANetns):
        return 0


def configured_ends(ns: str) -> set[str]:
    """Names of the interfaces in netns `ns` that are up and addressed."""
    try:
        return kernel_floor.configured_names(ns)
    except (NetnsGone, NotANetns):
        return set()


def cold_start(file: Path) -> dict[str, Any]:
    """Seconds from the daemon's spawn, the pods placed before, until it is ready and
    until every end has carrier."""
    with lab_of(file, with_daemons=False) as (lab, names, state):
        wanted = wanted_ends(state, names)
        restore_pods(state, names)
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
        return {"ready_s": round(ready_s, 3), "all_up_s": round(up_s, 3)}


def restarts(file: Path, pod_name: str, count: int, config: Path | None) -> dict[str, Any]:
    with lab_of(file, with_daemons=True, config=config) as (lab, names, state):
        shim = MeshwireRuntime().cni_argv()
        record = state.pod(pod_name)
        ends = pod_ends(state, names, record)
        daemon_log = DaemonLog(lab.log(f"daemon/{NODE}"))
        revision = topology_revision(state, names)
        loop_started = time.monotonic()
        done = [restart(lab, state, record, shim, ends, daemon_log) for _ in range(count)]
        writes = topology_revision(state, names) - revision
        loop_s = time.monotonic() - loop_started
        return {
            "file": file.name,
            "pod": record.key,
            "links": sum(len(e) for e in ends.values()) // 2,
            "restarts": count,
            **summary(done),
            "status_writes": status_cap(writes, loop_s, count, config),
        }


def pod_ends(state: LabState, names: LabNames, record: PodRecord) -> dict[str, set[str]]:
    """pod netns -> interface names, for both ends of every link of `record`'s pod."""
    placement = {key: pod.node for key, pod in state.pods.items()}
    ends: dict[str, set[str]] = {}
    for link in lab_links(topologies_of(state.topologies), placement, "vxlan"):
        if record.key in (link.a.pod, link.b.pod):
            for end in (link.a, link.b):
                namespace, _, pod = end.pod.partition("/")
                ends.setdefault(names.pod_netns(namespace, pod), set()).add(end.intf)
    return ends


@dataclass(frozen=True, slots=True)
class Restart:
    """One restart: ADD exec until every end is up, until the ADD returned, and the
    parts in ms (daemon's, shim's, seen), None when the daemon logged no split."""

    links_up_s: float
    add_returned_s: float
    parts_ms: dict[str, float] | None


def restart(
    lab: LabDir,
    state: LabState,
    record: PodRecord,
    shim: list[str],
    ends: dict[str, set[str]],
    daemon_log: DaemonLog,
) -> Restart:
    """CNI DEL, a new netns, CNI ADD through `shim`, as `lab restart-pod` does; returns
    once both ends of each of `ends` are up."""
    pods.detach(lab, state, record, shim)
    pods.recreate_netns(lab, state, record)
    daemon_log.skip()
    exec_at: list[float] = []
    with EndWatch(ends) as watch:
        pods.attach(lab, state, record, shim, on_exec=partial(stamp, exec_at))
        started = exec_at[0]
        returned = time.monotonic()
        wait(watch.all_up, "links up", RESTART_POLL)
        seen = time.monotonic()
    timings = daemon_log.add_timings(record.key)
    if timings is not None:
        timings["shim_ms"] = (returned - started) * 1000 - timings["daemon_ms"]
        timings["seen_ms"] = (seen - returned) * 1000
    return Restart(seen - started, returned - started, timings)


def summary(done: list[Restart]) -> dict[str, Any]:
    """p50/p99/max of each figure of `done`, and how many had the daemon's split."""
    parts: dict[str, list[float]] = {}
    for one in done:
        for part, ms in (one.parts_ms or {}).items():
            parts.setdefault(part, []).append(ms / 1000)
    return {
        "links_up_ms": percentiles([one.links_up_s for one in done]),
        "add_returned_ms": percentiles([one.add_returned_s for one in done]),
        "parts_ms": {
            part.removesuffix("_ms"): percentiles(values) for part, values in sorted(parts.items())
        },
        "parts_logged": len(parts.get("daemon_ms", [])),
    }


def topology_revision(state: LabState, names: LabNames) -> int:
    """The API's Topology resourceVersion: every status write that changed a field bumps it."""

    def read() -> int:
        listed = api_client(state).list_cluster_custom_object(GROUP, VERSION, PLURAL)
        return int(listed["metadata"]["resourceVersion"])

    return netns.in_netns(names.hub_netns, read)


def status_cap(writes: int, loop_s: float, count: int, config: Path | None) -> dict[str, Any]:
    """Whether the restarts ran into the daemon's status write cap (`reconcile.status_rate`,
    the writer's burst): an ADD answers only once its pod's placement is written, so
    once the bucket is dry each ADD's `status` part is its wait for a token."""
    rate = float(read_base(config).get("reconcile", {}).get("status_rate", DEFAULT_WRITE_RATE))
    bound = writes > DEFAULT_WRITE_BURST + 0.9 * rate * loop_s
    result: dict[str, Any] = {
        "writes": writes,
        "per_restart": round(writes / count, 2),
        "per_s": round(writes / loop_s, 1),
        "status_rate": rate,
        "burst": DEFAULT_WRITE_BURST,
        "bound_by_status_rate": bound,
    }
    if bound:
        result["note"] = (
            f"restarts back to back needed {writes / loop_s:.0f} status writes/s, over the "
            f"cap of {rate:g}/s once the burst of {DEFAULT_WRITE_BURST} was spent: the "
            "status part is the wait for a token; --config with a higher "
            "reconcile.status_rate shows the restart path alone"
        )
    return result


def stamp(into: list[float]) -> None:
    into.append(time.monotonic())


class EndWatch:
    """Whether given interfaces are up with carrier, asked of the kernel by name.

    One raw netlink socket per pod netns, opened before the ADD (the restarted
    pod's new netns exists by then), and one GETLINK per end per look: about
    0.05 ms, where a dump of each netns through pyroute2 took milliseconds and
    blurred the figure it measured.
    """

    def __init__(self, ends: dict[str, set[str]]) -> None:
        self.ends = ends
        self.sockets: dict[str, rtnl.Rtnl] = {}

    def __enter__(self) -> EndWatch:
        for name in self.ends:
            with open_netns(netns_path(name)) as ns:
                self.sockets[name] = rtnl.Rtnl(
                    socket_in(ns, socket.AF_NETLINK, socket.SOCK_DGRAM, socket.NETLINK_ROUTE)
                )
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sock in self.sockets.values():
            sock.close()

    def all_up(self) -> bool:
        for name, intfs in self.ends.items():
            for intf in intfs:
                try:
                    replies = self.sockets[name].request(rtnl.get_link(intf))
                except NetlinkError:
                    return False
                if not any(
                    kind == rtnl.RTM_NEWLINK and kernel_floor.carrier(body)
                    for kind, body in replies
                ):
                    return False
        return True


class DaemonLog:
    """The daemon's log file, read from where the last look stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def skip(self) -> None:
        """Forget everything logged so far."""
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def add_timings(self, pod_key: str) -> dict[str, float] | None:
        """The parts (ms) of the last `CNI ADD <pod_key> timings` line logged since the
        last look, or None if there is none (the daemon logs above info)."""
        if not self.path.exists():
            return None
        with self.path.open("rb") as file:
            file.seek(self.offset)
            text = file.read().decode(errors="replace")
            self.offset = file.tell()
        return parse_add_timings(text, pod_key)


def parse_add_timings(text: str, pod_key: str) -> dict[str, float] | None:
    """The parts of the last `ADD_TIMINGS` line for `pod_key` in `text` (text or JSON logs)."""
    head = ADD_TIMINGS.split("%s", 1)[0]
    found = None
    for line in text.splitlines():
        if f"{head}{pod_key} timings:" in line:
            found = {name: float(value) for name, value in PART.findall(line)}
    return found


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
    parser.add_argument("--runs", type=int, default=1, help="converge runs (medians if > 1)")
    parser.add_argument("--skip-converge", action="store_true")
    parser.add_argument("--skip-floor", action="store_true", help="no kernel floor run")
    parser.add_argument("--skip-restarts", action="store_true")
    parser.add_argument("--config", type=Path, help="the daemons' config file (lab up --config)")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"api": API_VERSION}
    if not args.skip_converge:
        results["converge"] = converge_with_floor(
            args.converge_file, args.runs, not args.skip_floor
        )
        if args.runs > 1:
            print(json.dumps(results["converge"]), flush=True)
    if not args.skip_restarts:
        results["restart"] = restarts(args.restart_file, args.pod, args.restarts, args.config)
        print(json.dumps(results["restart"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
