"""Churn: a lab kept busy with pod restarts, moves, edits and kills, then proven whole.

    .venv/bin/python bench/churn.py [--pods 60] [--chords 60] [--nodes 3] [--ops 300]
        [--parallel 4] [--settle 300] [--config FILE] [--seed 1] [--name NAME] [--keep]
        [--json FILE]

meshnet-cni breaks under churn; this is the churn. The lab is lab_scale's
ring-plus-chords on `--nodes` simulated nodes (`--config examples/grpc.yaml`
for gRPC wires between nodes). Then `--ops` operations run, `--parallel` at a
time, each on a random pod or node, without waiting for the lab to settle
(the weights of WEIGHTS in brackets):

  - restart a pod (5): CNI DEL, a new netns, CNI ADD with a new container id;
  - move a pod to another node (3): DEL on its node, ADD on the other, so its
    links change kind (veth <-> vxlan or wire);
  - edit the topology (2): a random link leaves both pods' Topology objects,
    or comes back if it had left (`meshwire apply` of the two);
  - change a link's MTU (1): one of its ends gets `mtu: 9000`, or loses it;
  - kill a node's daemon with SIGKILL and start it again (1);
  - kill the embedded API with SIGKILL and start it again (1): every
    daemon's watch breaks, and CNI calls and edits fail until it is back;
  - cut a node off the underlay for 1-4 s (1): its daemon loses the API and
    its peers, and what crosses nodes stops until it is plugged back;
  - in a lab with gRPC wires, also kill one of a node's dataplane workers
    with SIGKILL (1): its daemon starts another and hands it its TAPs.

The operations are the lab's own (`meshwire lab restart-pod`, `move-pod`,
`kill-daemon`, `kill-api`, `partition`), run in this process on one state. A
pod, a node or the API is never operated on twice at once. A CNI call that fails
(its node's daemon or the API is down) is retried the way a kubelet retries
a sandbox: after 0.5 s, doubling to 4 s, as a restart of the pod; a failed
`apply` is retried the same way, as a user or a controller would.

After the last operation, `lab check` (every link proven by ARP both ways)
runs until every link passes or `--settle` seconds have gone: the time it
took is how long the lab needed to converge. The daemons' full pass (every
`reconcile.full_interval`, 60 s) repairs what events missed; raise it in
`--config` and only the events can converge the lab, so a missed one shows.
Then, polled within what is left of `--settle` (a node cut off until the end
learns of the last edits only then), each daemon's /metrics must show every
link end done, and for the wire: as many ready wires on the node
as the final placement gives it, every one in a worker, and no stream whose
refcount differs from its wires; no interface may be left of a link that
was edited out, and every end must have its link's MTU. Exit status 0 only
if all of that holds; if not, the daemons' logs are copied out of the lab
first and the report says where.
The lab is named `ch<hex>` or `--name` (netns `mwl<name>-…`); `lab down` runs
at the end even when a step fails, unless `--keep`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from lab_scale import daemon_metrics, generate
from wire_bench import workers_in

from meshwire.tools.lab import ops, processes
from meshwire.tools.lab.check import check_all
from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.kernel import Ends, netns_ends
from meshwire.tools.lab.lab_names import LabNames
from meshwire.tools.lab.links import LabLink, lab_links, topologies_of
from meshwire.tools.lab.runtime import MeshwireRuntime
from meshwire.tools.lab.state import LabDir, LabState

MESHWIRE = [sys.executable, "-m", "meshwire.tools.cli", "lab"]
APPLY = [sys.executable, "-m", "meshwire.tools.cli", "apply"]
WEIGHTS = {
    "restart": 5, "move": 3, "edit": 2, "mtu": 1, "kill": 1, "api": 1, "partition": 1, "worker": 1
}  # fmt: skip
# The MTU a link's "mtu" operation toggles on one of its ends.
JUMBO = 9000
# How long a partition lasts, at random: within TCP's patience (the wire's streams
# survive it) but long enough to lose the API and in-flight handshakes.
PARTITION_SECONDS = (1.0, 4.0)
# Operations return at once: churn overlaps them and checks the whole lab once it settles.
NO_WAIT = 0.0
# The key the API operation is serialized on (one restart of it at a time).
API = "api"
RETRY_FIRST, RETRY_MAX, RETRIES = 0.5, 4.0, 30
# One saver at a time: the operations of different pods share the state file. A
# daemon's restart holds it throughout, as it changes the list of processes.
SAVING = threading.RLock()


class SerialLab(LabDir):
    """The lab directory, its state saved by one thread at a time."""

    __slots__ = ()

    def save(self, state: LabState) -> None:
        with SAVING:
            super().save(state)


def lab(name: str, *words: str) -> str:
    done = subprocess.run(
        [*MESHWIRE, *words, "--name", name], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"meshwire lab {words[0]}: {done.stderr or done.stdout}")
    return done.stdout


class Churn:
    """Runs operations on one lab state, a pod or a node never in two at once."""

    def __init__(self, directory: LabDir, state: LabState) -> None:
        self.lab = directory
        self.state = state
        self.runtime = MeshwireRuntime(with_daemons=True)
        self.busy: dict[str, threading.Lock] = {
            key: threading.Lock() for key in [*state.pods, *state.nodes, API]
        }
        self.retries = 0
        self.workers_killed = 0
        self.failed: list[str] = []
        self.seconds: dict[str, list[float]] = {kind: [] for kind in WEIGHTS}
        # "kind target" of every operation, in the order they ended.
        self.ended: list[str] = []
        self._counting = threading.Lock()
        # Each link's entries in its pods' Topology objects, as first applied.
        self.original: dict[int, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
        for obj in state.topologies:
            for link in obj["spec"]["links"]:
                self.original.setdefault(link["uid"], []).append((obj, link))
        self._editing = threading.Lock()

    def run(self, kind: str, target: str, node: str) -> None:
        name = target.split("/", 1)[-1]
        actions: dict[str, Callable[[], str]] = {
            "restart": lambda: ops.restart_pod(self.lab, self.state, self.runtime, name, NO_WAIT),
            "move": lambda: ops.move_pod(self.lab, self.state, self.runtime, name, node, NO_WAIT),
            "kill": lambda: self._kill(target),
            "api": self._kill_api,
            "partition": lambda: ops.partition_node(self.state, target, float(node)),
            "edit": lambda: self._edit(int(target)),
            "mtu": lambda: self._mtu(int(target)),
            "worker": lambda: self._kill_worker(target),
        }
        with self.busy.get(target, threading.Lock()):
            start = time.monotonic()
            self._until_done(actions[kind], name if kind in ("restart", "move") else None)
            with self._counting:
                self.seconds[kind].append(time.monotonic() - start)
                self.ended.append(f"{kind} {target}")

    def _kill_worker(self, node: str) -> str:
        """SIGKILL one dataplane worker of the node's daemon (its process group)."""
        daemon = self.state.process(f"daemon/{node}")
        if daemon is None or not processes.is_running(daemon):
            return f"node {node}: no daemon"
        for pid in sorted(workers_in({daemon.pid})):
            with contextlib.suppress(ProcessLookupError):
                if os.getpgid(pid) == daemon.pid:  # still the one listed
                    os.kill(pid, signal.SIGKILL)
                    with self._counting:
                        self.workers_killed += 1
                    return f"node {node}: worker {pid} killed"
        return f"node {node}: no worker"

    def _kill(self, node: str) -> str:
        with SAVING:
            return ops.kill_daemon(self.lab, self.state, self.runtime, node)

    def _kill_api(self) -> str:
        with SAVING:
            return ops.kill_api(self.lab, self.state, self.runtime)

    def _edit(self, uid: int) -> str:
        """Take link `uid` out of both its pods' Topology objects, or put it back."""
        with self._editing:
            with SAVING:  # the objects are the state's, which a save may be writing
                for obj, link in self.original[uid]:
                    links = obj["spec"]["links"]
                    kept = [x for x in links if x["uid"] != uid]
                    links[:] = (
                        kept
                        if len(kept) < len(links)
                        else sorted([*kept, link], key=lambda x: int(x["uid"]))
                    )
            return self._apply(uid, "edited")

    def _mtu(self, uid: int) -> str:
        """Give link `uid` an MTU of JUMBO on its first end, or take it away (also while
        the link is edited out: it comes back with it)."""
        with self._editing:
            with SAVING:
                _, link = self.original[uid][0]
                if link.pop("mtu", None) is None:
                    link["mtu"] = JUMBO
            return self._apply(uid, f"mtu {link.get('mtu', 'default')}")

    def _apply(self, uid: int, what: str) -> str:
        """`meshwire apply` of link `uid`'s objects, retried while it fails."""
        objects = [obj for obj, _ in self.original[uid]]
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
            with SAVING:
                yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}, file)
            file.flush()
            token = ("--token-file", str(LabDir(Path(self.state.directory)).token_file))
            argv = [*APPLY, "-f", file.name, "--server", self.state.host_url, *token]
            delay = RETRY_FIRST
            for _ in range(RETRIES):
                done = subprocess.run(argv, capture_output=True, text=True, check=False)
                if done.returncode == 0:
                    return f"link {uid} {what}"
                with self._counting:
                    self.retries += 1
                time.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
        raise LabError(f"apply of link {uid}: {done.stderr.strip()}")

    def expected_mtu(self, uid: int, default: int) -> int:
        return next((link["mtu"] for _, link in self.original[uid] if "mtu" in link), default)

    def _until_done(self, action: Callable[[], str], pod: str | None) -> None:
        delay, error = RETRY_FIRST, ""
        for _ in range(RETRIES):
            try:
                action()
                return
            except LabError as exc:
                error = str(exc)
            if pod is None:
                break
            with self._counting:
                self.retries += 1
            time.sleep(delay)
            delay = min(delay * 2, RETRY_MAX)
            # As a kubelet does: the failed sandbox goes, a new one is made.
            action = lambda: ops.restart_pod(self.lab, self.state, self.runtime, pod, NO_WAIT)  # noqa: E731
        with self._counting:
            self.failed.append(f"{pod or 'daemon'}: {error}")


def schedule(state: LabState, count: int, rng: random.Random) -> list[tuple[str, str, str]]:
    """(kind, target: a pod key, a node or a link uid, the node to move to or the
    seconds of a partition) per operation."""
    links = len({link["uid"] for obj in state.topologies for link in obj["spec"]["links"]})
    pods, nodes = sorted(state.pods), sorted(state.nodes)
    weights = {k: w for k, w in WEIGHTS.items() if k != "worker" or wires(state)}
    kinds = rng.choices(list(weights), weights=list(weights.values()), k=count)
    out = []
    for kind in kinds:
        if kind in ("kill", "worker"):
            out.append((kind, rng.choice(nodes), ""))
        elif kind == "partition":
            out.append((kind, rng.choice(nodes), f"{rng.uniform(*PARTITION_SECONDS):.1f}"))
        elif kind == "api":
            out.append((kind, API, ""))
        elif kind in ("edit", "mtu"):
            out.append((kind, str(rng.randint(1, links)), ""))
        else:
            out.append((kind, rng.choice(pods), rng.choice(nodes)))
    return out


def wires(state: LabState) -> bool:
    return state.inter_node_link_type == "grpc"


def current_links(state: LabState) -> list[LabLink]:
    placement = {key: pod.node for key, pod in state.pods.items()}
    return lab_links(topologies_of(state.topologies), placement, state.inter_node_link_type)


def settle(
    names: LabNames, links: list[LabLink], within: float
) -> tuple[float, list[str], list[str]]:
    """Seconds until every link passes check (or `within`), the check lines of the links
    failing at first, and of those failing at the end."""
    start = time.monotonic()
    first: list[str] | None = None
    while True:
        failing = [r.line() for r in check_all(names, links) if not r.ok]
        first = failing if first is None else first
        if not failing or time.monotonic() - start > within:
            return time.monotonic() - start, first, failing
        time.sleep(1.0)


def until_none(find: Callable[[], list[str]], within: float) -> tuple[float, list[str]]:
    """Seconds until `find` finds nothing (or `within` has gone), and what it found last."""
    start = time.monotonic()
    while True:
        found = find()
        if not found or time.monotonic() - start > within:
            return time.monotonic() - start, found
        time.sleep(1.0)


def leftovers(names: LabNames, churn: Churn, links: list[LabLink]) -> list[str]:
    """Interfaces of links edited out of the topology (not in `links`) still in their pods."""
    present = {link.uid for link in links}
    found = []
    for uid, entries in sorted(churn.original.items()):
        if uid in present:
            continue
        for obj, link in entries:
            pod = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
            netns = names.pod_netns(obj["metadata"]["namespace"], obj["metadata"]["name"])
            if link["local_intf"] in netns_ends(netns):
                what = describe(netns, link["local_intf"])
                found.append(
                    f"link {uid} was removed but {pod}:{link['local_intf']} is left ({what})"
                )
    return found


def wrong_mtus(names: LabNames, churn: Churn, links: list[LabLink], default: int) -> list[str]:
    """Ends of the links in `links` whose MTU is not their link's."""
    kernel = Ends(
        names.pod_netns(*end.pod.split("/")) for link in links for end in (link.a, link.b)
    )
    found = []
    for link in links:
        want = churn.expected_mtu(link.uid, default)
        for end in (link.a, link.b):
            have = kernel.get(names.pod_netns(*end.pod.split("/")), end.intf).mtu
            if have != want:
                found.append(f"link {link.uid}: {end.pod}:{end.intf} has MTU {have}, not {want}")
    return found


def describe(netns: str, intf: str) -> str:
    """Kind, alias (meshwire's mark) and ifindex of an interface, for a failure report."""
    done = subprocess.run(
        ["ip", "-n", netns, "-d", "-j", "link", "show", intf],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        (link,) = json.loads(done.stdout)
    except ValueError:
        return done.stderr.strip() or "gone"
    kind = link.get("linkinfo", {}).get("info_kind", "?")
    return f"{kind}, alias {link.get('ifalias', '')!r}, ifindex {link.get('ifindex')}"


def problems(state: LabState, links: list[LabLink], seen: dict[str, dict[str, float]]) -> list[str]:
    """What the daemons report that a settled lab of `links` must not have."""
    wanted: Counter[str] = Counter()
    for link in links:
        if link.kind == "grpc":
            wanted.update(state.pods[end].node for end in (link.a.pod, link.b.pod))
    found = []
    for node, samples in seen.items():
        for name, value in samples.items():
            if name.startswith("meshwire_links{") and 'state="done"' not in name and value:
                found.append(f"{node}: {name} = {value:.0f}")
        if not wires(state):
            continue
        expected = {
            'meshwire_wires{state="ready"}': wanted[node],
            "meshwire_wires_in_workers": wanted[node],
            "meshwire_wire_stream_ref_mismatches": 0,
        }
        for name, value in expected.items():
            if samples.get(name, 0.0) != value:
                found.append(f"{node}: {name} = {samples.get(name)}, expected {value}")
    return found


def base_mtu(config: Path | None) -> int:
    """The daemons' `mtu`: what a link without its own has."""
    data = yaml.safe_load(config.read_text()) if config is not None else None
    return int((data or {}).get("mtu", 1500))


def whole(report: dict[str, Any]) -> bool:
    """Every operation done, every link passing, nothing wrong: the lab came back whole."""
    keys = ("failed_ops", "failing_links", "problems")
    return all(key in report and not report[key] for key in keys)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=60)
    parser.add_argument("--chords", type=int, default=60, help="random links besides the ring")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--ops", type=int, default=300)
    parser.add_argument("--parallel", type=int, default=4, help="operations at a time")
    parser.add_argument("--settle", type=float, default=300.0, help="seconds to converge, at most")
    parser.add_argument("--config", type=Path, help="the daemons' config (lab up --config)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    parser.add_argument("--name", help="the lab's name (default: ch and 4 hex digits)")
    parser.add_argument("--keep", action="store_true", help="leave the lab up (lab down --name)")
    args = parser.parse_args(argv)

    name = args.name or f"ch{secrets.token_hex(2)}"
    rng = random.Random(args.seed)
    report: dict[str, Any] = {"pods": args.pods, "links": args.pods + args.chords}
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "churn.yml"
        topologies = generate(args.pods, args.chords, args.seed)
        file.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": topologies}))
        up = ["up", str(file), "--nodes", str(args.nodes), "--wait", "600"]
        if args.config is not None:
            up += ["--config", str(args.config)]
        try:
            lab(name, *up)
            directory = SerialLab(LabDir.locate(name, None).path)
            churn = Churn(directory, directory.load())
            plan = schedule(churn.state, args.ops, rng)
            start = time.monotonic()
            with ThreadPoolExecutor(args.parallel) as pool:
                list(pool.map(lambda op: churn.run(*op), plan))
            report["ops"] = dict(Counter(kind for kind, _, _ in plan))
            report["ops_seconds"] = time.monotonic() - start
            report["op_median_seconds"] = {
                kind: statistics.median(s) for kind, s in churn.seconds.items() if s
            }
            report["retries"] = churn.retries  # CNI calls and applies that failed, then retried
            report["workers_killed"] = churn.workers_killed
            # What the lab settles from: a slow settle after an API restart is expected.
            report["last_ops"] = churn.ended[-args.parallel :]
            report["failed_ops"] = churn.failed
            names, links = LabNames(name), current_links(churn.state)
            settled = settle(names, links, args.settle)
            report["settle_seconds"], report["failing_at_first"], report["failing_links"] = settled
            report["links_removed_at_end"] = len(churn.original) - len(links)
            mtu = base_mtu(args.config)

            def wrong() -> list[str]:
                found = problems(churn.state, links, daemon_metrics(churn.state))
                found += leftovers(names, churn, links)
                return found + wrong_mtus(names, churn, links, mtu)

            # A node cut off until the end learns of the last edits only now: what
            # the check of links cannot see (leftovers, MTUs, metrics) gets the same
            # time to settle.
            within = max(args.settle - report["settle_seconds"], 0.0)
            report["problems_settle_seconds"], report["problems"] = until_none(wrong, within)
        finally:
            logs = LabDir.locate(name, None).path / "logs"
            if not whole(report) and logs.is_dir():
                kept = Path(tempfile.mkdtemp(prefix=f"meshwire-churn-{name}-"))
                shutil.copytree(logs, kept / "logs")
                report["logs"] = str(kept / "logs")
            if args.keep:
                print(f"lab {name} left up", file=sys.stderr)
            else:
                subprocess.run(
                    [*MESHWIRE, "down", "--name", name], capture_output=True, check=False
                )
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if whole(report) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
