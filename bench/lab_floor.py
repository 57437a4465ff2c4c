"""The kernel's own floor for a whole lab: `ip -batch` and `tc -batch` making its links.

    .venv/bin/python bench/lab_floor.py [--pods 1000] [--chords 1000] [--nodes 4] [--seed 1]

`measure(links, placement, nodes, prefix, stages)` builds, timed, what `meshwire lab up`
leaves in the kernel for the same lab, the way meshwire makes it (docs/design.md:
every pod end a veth whose peer is in its node's netns, the transport stitched
behind that peer with tc), with the kernel's own tools and nothing between them:

- the underlay: a hub netns (`<prefix>h`) with a bridge, one netns per node
  (`<prefix>n<k>`) joined to it by a veth at MTU 9216, addressed 10.99.0.<k>/24;
- every pod's netns (`<prefix>p<i>`), made by one `ip -batch` of `netns add`;
- per node, one `ip -batch`: for each link end on the node, the pod's veth pair
  (the pod end straight in the pod's netns, with its final name) and, for a
  link whose far end is on another node, a vxlan device (VNI = the link's uid,
  to the far node's address); then one `tc -batch`: a clsact qdisc and a u32
  match-all filter with a mirred redirect on each node side and vxlan device,
  toward its partner (the other pod's node side on the same node, or the vxlan
  device);
- per pod, one `ip -batch` that addresses and raises its ends (4 at a time, as
  the lab's 4 daemons work at once).

It returns the seconds until every `ip`/`tc` run returned and until every pod end
was up with carrier (polled every 20 ms), and the seconds of each stage.
Everything it made is deleted afterwards, even on failure. The kernel frees
deleted namespaces in the background, for 10-20 s after 1,000 of them: `settle()`
waits until that is done and the machine is idle again, so whatever is measured
next does not pay for it. `bench/lab_scale.py` runs the floor in the
same run as `lab up` and reports the ratio.
"""

from __future__ import annotations

import argparse
import json
import secrets
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kernel_floor import up_names

from meshwire.control.links.vxlan import VXLAN_PORT
from meshwire.tools.lab import netns
from meshwire.tools.lab.placement import round_robin

UNDERLAY_MTU = 9216
POLL = 0.02
TIMEOUT = 300.0
PARALLEL = 4
# settle(): idle share of the CPUs, held this long, and the longest wait.
SETTLED_IDLE = 0.8
SETTLED_FOR = 3.0
SETTLE_TIMEOUT = 600.0


@dataclass(frozen=True, slots=True)
class FloorLink:
    """One link of the lab: its uid, and each end's pod, interface name and address."""

    uid: int
    a: str
    a_intf: str
    a_ip: str
    b: str
    b_intf: str
    b_ip: str


def links_of(topologies: Iterable[dict]) -> list[FloorLink]:
    """The links of Topology objects (each link once, from the end whose pod sorts first)."""
    out = []
    for topology in topologies:
        pod = topology["metadata"]["name"]
        for link in topology["spec"]["links"]:
            if pod < link["peer_pod"]:
                out.append(
                    FloorLink(
                        link["uid"], pod, link["local_intf"], link["local_ip"],
                        link["peer_pod"], link["peer_intf"], link["peer_ip"],
                    )
                )  # fmt: skip
    return out


class Names:
    """The floor's netns and interface names, all under `prefix`."""

    def __init__(self, prefix: str, pods: list[str], nodes: int) -> None:
        self.hub = f"{prefix}h"
        self.nodes = [f"{prefix}n{k}" for k in range(nodes)]
        self.pods = {pod: f"{prefix}p{i}" for i, pod in enumerate(pods)}

    def every_netns(self) -> list[str]:
        return [*self.pods.values(), *self.nodes, self.hub]


def node_address(k: int) -> str:
    return f"10.99.0.{k + 1}"


def underlay(names: Names) -> list[tuple[str, str, str]]:
    """(tool, netns, script) runs that make the hub's bridge and join every node to it."""
    hub = ["link add br0 type bridge", "link set br0 up"]
    runs = []
    for k, node in enumerate(names.nodes):
        hub += [
            f"link add u{k} mtu {UNDERLAY_MTU} type veth peer name ul netns {node}",
            f"link set u{k} master br0",
            f"link set u{k} up",
        ]
        runs.append(("ip", node, f"address add {node_address(k)}/24 dev ul\nlink set ul up\n"))
    return [("ip", names.hub, "\n".join(hub) + "\n"), *runs]


def node_scripts(
    links: list[FloorLink],
    placement: dict[str, str],
    node: str,
    k: int,
    nodes: list[str],
    names: Names,
) -> tuple[str, str]:
    """Node `node`'s (index k) `ip -batch` and `tc -batch` scripts."""
    made, stitches = [], []

    def stitch(here: str, there: str) -> None:
        stitches.append(f"qdisc add dev {here} clsact")
        stitches.append(
            f"filter add dev {here} ingress prio 1 protocol all u32 match u32 0 0 "
            f"action mirred egress redirect dev {there}"
        )

    for link in links:
        ends = [(link.a, link.a_intf, "a"), (link.b, link.b_intf, "b")]
        local = [end for end in ends if placement[end[0]] == node]
        for pod, intf, side in local:
            made.append(
                f"link add s{link.uid}{side} type veth peer name {intf} netns {names.pods[pod]}"
            )
            made.append(f"link set s{link.uid}{side} up")
        if len(local) == 2:
            stitch(f"s{link.uid}a", f"s{link.uid}b")
            stitch(f"s{link.uid}b", f"s{link.uid}a")
        elif len(local) == 1:
            side = local[0][2]
            far = placement[link.b if side == "a" else link.a]
            remote = node_address(nodes.index(far))
            made.append(
                f"link add v{link.uid} type vxlan id {link.uid} remote {remote} "
                f"local {node_address(k)} dstport {VXLAN_PORT} dev ul"
            )
            made.append(f"link set v{link.uid} up")
            stitch(f"s{link.uid}{side}", f"v{link.uid}")
            stitch(f"v{link.uid}", f"s{link.uid}{side}")
    return "\n".join(made) + "\n", "\n".join(stitches) + "\n"


def pod_scripts(links: list[FloorLink]) -> dict[str, str]:
    """Per pod, the `ip -batch` script that raises its loopback and addresses and raises
    its ends."""
    lines: dict[str, list[str]] = {}
    for link in links:
        for pod, intf, ip in ((link.a, link.a_intf, link.a_ip), (link.b, link.b_intf, link.b_ip)):
            lines.setdefault(pod, ["link set lo up"])
            lines[pod] += [f"address add {ip} dev {intf}", f"link set {intf} up"]
    return {pod: "\n".join(body) + "\n" for pod, body in lines.items()}


def run_batch(tool: str, ns: str | None, script: Path) -> None:
    argv = [tool, *(["-n", ns] if ns else []), "-batch", str(script)]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def measure(
    links: list[FloorLink],
    placement: dict[str, str],
    nodes: list[str],
    prefix: str,
    stages: dict[str, float],
    inspect: Callable[[Names], None] | None = None,
) -> tuple[float, float]:
    """Seconds until every batch returned, and until every pod end was up with carrier;
    `stages` gets the seconds of each stage (`netns_s`, `nodes_s`, `pods_s`).
    `inspect`, if given, is called with the names once every end is up, before
    anything is deleted.

    Raises RuntimeError if they are not up within TIMEOUT, CalledProcessError if a
    tool fails.
    """
    pods = sorted(placement)
    names = Names(prefix, pods, len(nodes))
    per_pod = pod_scripts(links)
    ends = Counter(pod for link in links for pod in (link.a, link.b))
    with tempfile.TemporaryDirectory(prefix="mwlabfloor") as tmp:
        scripts = Path(tmp)

        def script(name: str, text: str) -> Path:
            path = scripts / name
            path.write_text(text)
            return path

        namespaces = script("netns", "".join(f"netns add {ns}\n" for ns in names.every_netns()))
        underlay_runs = [(tool, ns, script(f"u-{ns}", text)) for tool, ns, text in underlay(names)]
        node_runs = []
        for k, node in enumerate(nodes):
            made, stitched = node_scripts(links, placement, node, k, nodes, names)
            node_ns = names.nodes[k]
            node_runs += [
                ("ip", node_ns, script(f"l{k}", made)),
                ("tc", node_ns, script(f"t{k}", stitched)),
            ]
        pod_runs = [(names.pods[pod], script(f"p-{pod}", text)) for pod, text in per_pod.items()]
        try:
            started = time.monotonic()
            run_batch("ip", None, namespaces)
            stages["netns_s"] = time.monotonic() - started
            for tool, ns, path in [*underlay_runs, *node_runs]:
                run_batch(tool, ns, path)
            stages["nodes_s"] = time.monotonic() - started - stages["netns_s"]
            with ThreadPoolExecutor(PARALLEL) as pool:
                list(pool.map(lambda run: run_batch("ip", *run), pod_runs))
            returned = time.monotonic() - started
            stages["pods_s"] = returned - stages["netns_s"] - stages["nodes_s"]
            deadline = started + TIMEOUT
            waiting = dict(ends)
            while waiting:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"lab floor: {len(waiting)} pods' ends not up in {TIMEOUT:.0f}s"
                    )
                for pod in list(waiting):
                    if len(up_names(names.pods[pod])) >= waiting[pod]:
                        del waiting[pod]
                if waiting:
                    time.sleep(POLL)
            up = time.monotonic() - started
            if inspect is not None:
                inspect(names)
            return returned, up
        finally:
            with ThreadPoolExecutor(PARALLEL) as pool:
                list(pool.map(netns.delete, names.every_netns()))


def cpu_idle_ticks() -> tuple[int, int]:
    """(idle, total) jiffies of all CPUs since boot, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return fields[3] + fields[4], sum(fields)


def freeing_namespaces() -> bool:
    """Whether a kernel worker is running the network namespace cleanup now (a kworker
    names the workqueue it runs, `kworker/u8:4+netns`)."""
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().rstrip().endswith("+netns"):
                return True
        except OSError:  # the task ended
            continue
    return False


def settle(idle: float = SETTLED_IDLE, timeout: float = SETTLE_TIMEOUT) -> float:
    """Waits until no namespace is being freed and the CPUs were at least `idle` idle,
    both for SETTLED_FOR seconds in a row; returns the seconds waited (`timeout` at
    most). The kernel frees namespaces one batch after another, waiting on the
    network's locks and grace periods more than the CPUs: the CPUs alone look idle
    well before it is done, and links made meanwhile wait behind it."""
    started = time.monotonic()
    quiet_since = None
    last = cpu_idle_ticks()
    while time.monotonic() - started < timeout:
        time.sleep(0.5)
        now = cpu_idle_ticks()
        share = (now[0] - last[0]) / max(1, now[1] - last[1])
        last = now
        if share < idle or freeing_namespaces():
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= SETTLED_FOR:
            break
    return time.monotonic() - started


def floor_of(topologies: list[dict], nodes: int) -> dict[str, float]:
    """The floor of the lab of `topologies` on `nodes` nodes placed as `lab up` places them,
    measured on an idle machine; returns once the kernel has freed what it made
    (`settle`)."""
    node_names = [f"node{k + 1}" for k in range(nodes)]
    placement = round_robin([t["metadata"]["name"] for t in topologies], node_names)
    stages: dict[str, float] = {"settled_before_s": settle()}
    prefix = f"mwlf{secrets.token_hex(2)}"
    try:
        returned, up = measure(links_of(topologies), placement, node_names, prefix, stages)
    finally:
        stages["settled_after_s"] = settle()
    return {
        **{name: round(seconds, 2) for name, seconds in stages.items()},
        "batch_s": round(returned, 2),
        "floor_s": round(up, 2),
    }


def main(argv: list[str]) -> int:
    from lab_scale import generate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--chords", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    print(json.dumps(floor_of(generate(args.pods, args.chords, args.seed), args.nodes)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
