"""Issue #2: the cost of a pod change must not grow with the cluster.

    .venv/bin/python bench/dependents_bench.py [--sizes 100,1000,10000] [--seed 1]

For each size N it builds a `TopologyTable` of N pods, each with about four
links to random other pods (both ends consistent: same uid, each naming the
other's interface), every pod running (status `src_ip` and `net_ns` set),
spread over two nodes; this daemon is node A. `DesiredLinks` derives node A's
rows once (the start-up cost, O(N), reported for context). Then it measures:

- `dependents`: `TopologyTable.dependents(key)` for random pods (the inverted
  peer index, KNE #743), and for one pod with four dependents (at every size)
  over and over: random keys pay the CPU cache misses of a bigger table, the
  same key shows the lookup alone;
- `pod change`: one random pod restarts (new `net_ns` and `container_id`):
  the informer's upsert into the table plus `DesiredLinks.step()`, which
  re-derives that pod and its dependents and rewrites their link rows.

Each figure is the median over rounds of the mean CPU time (this process's,
so a busy machine's scheduling does not count) per operation, with the
garbage collector on, as in the daemon. Nothing is created outside the process.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import time
from collections.abc import Callable

from meshwire.control.common.ids import Slot
from meshwire.control.model.topology import Link, Topology, TopologyStatus
from meshwire.control.reconcile.derive import NodeView
from meshwire.control.reconcile.desired import DesiredLinks
from meshwire.control.tables.links import new_links_table
from meshwire.control.tables.topologies import TopologyTable

NAMESPACE = "bench"
NODE_A = "10.0.0.1"
NODE_B = "10.0.0.2"
LINKS_PER_POD = 4
ROUNDS = 7
LOOKUPS_PER_ROUND = 20_000
CHANGES_PER_ROUND = 500


class _OneSlot:
    """Every namespace holds slot 0: derivation without an API."""

    def slot_of(self, namespace: str) -> Slot | str | None:
        return Slot(0, 0)


def lab(pods: int, seed: int) -> list[Topology]:
    """`pods` running Topology objects; link k joins pod k mod N to a random other pod."""
    rng = random.Random(seed)
    names = [f"p{i:05d}" for i in range(pods)]
    ends: list[list[Link]] = [[] for _ in range(pods)]
    for uid in range(1, pods * LINKS_PER_POD // 2 + 1):
        a = uid % pods
        b = (a + 1 + rng.randrange(pods - 1)) % pods
        a_intf, b_intf = f"eth{len(ends[a]) + 1}", f"eth{len(ends[b]) + 1}"
        ends[a].append(Link(uid, names[b], a_intf, b_intf))
        ends[b].append(Link(uid, names[a], b_intf, a_intf))
    return [
        Topology(NAMESPACE, name, tuple(ends[i]), running(i, generation=0))
        for i, name in enumerate(names)
    ]


def running(pod: int, generation: int) -> TopologyStatus:
    return TopologyStatus(
        src_ip=NODE_A if pod % 2 == 0 else NODE_B,
        net_ns=f"/var/run/netns/cni-{pod}-{generation}",
        container_id=f"c{pod}-{generation}",
    )


def median_round(run_round: Callable[[], float]) -> float:
    """Median over ROUNDS of `run_round()`, which times itself and returns ns per operation."""
    return statistics.median(run_round() for _ in range(ROUNDS))


@dataclasses.dataclass
class Result:
    pods: int
    rows: int
    initial_ms: float
    dependents_ns: float
    same_key_ns: float
    change_ns: float
    rederived: float


def measure(pods: int, seed: int) -> Result:
    rng = random.Random(seed + 1)
    table = TopologyTable()
    for topology in lab(pods, seed):
        table.upsert(topology)
    table.mark_initialized()
    links = new_links_table()
    desired = DesiredLinks(table, links, NodeView(node_ip=NODE_A), _OneSlot())
    start = time.process_time_ns()
    desired.step()
    initial_ms = (time.process_time_ns() - start) / 1e6
    keys = table.keys()
    # A pod with exactly LINKS_PER_POD dependents: the same work at every size.
    typical = next(k for k in keys if len(table.dependents(k)) == LINKS_PER_POD)

    def lookups(same_key: bool) -> float:
        if same_key:
            picks = [typical] * LOOKUPS_PER_ROUND
        else:
            picks = [rng.choice(keys) for _ in range(LOOKUPS_PER_ROUND)]
        start = time.process_time_ns()
        for key in picks:
            table.dependents(key)
        return (time.process_time_ns() - start) / LOOKUPS_PER_ROUND

    dependents_ns = median_round(lambda: lookups(same_key=False))
    same_key_ns = median_round(lambda: lookups(same_key=True))

    generations = dict.fromkeys(keys, 0)
    rederived: list[int] = []

    def changes() -> float:
        picks = [rng.choice(keys) for _ in range(CHANGES_PER_ROUND)]
        start = time.process_time_ns()
        for key in picks:
            old = table.get(key)
            assert old is not None
            generations[key] += 1
            status = running(int(old.name[1:]), generations[key])
            table.upsert(dataclasses.replace(old, status=status))
            rederived.append(len(desired.step()))
        return (time.process_time_ns() - start) / CHANGES_PER_ROUND

    change_ns = median_round(changes)
    desired.close()
    return Result(
        pods=pods,
        rows=len(links),
        initial_ms=initial_ms,
        dependents_ns=dependents_ns,
        same_key_ns=same_key_ns,
        change_ns=change_ns,
        rederived=statistics.mean(rederived),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="pod counts, comma-separated")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = [measure(n, args.seed) for n in sizes]
    print(
        f"{'pods':>7} {'rows(A)':>8} {'initial derive':>15} {'dependents()':>13} "
        f"{'same key':>10} {'pod change':>11} {'pods re-derived':>16}"
    )
    for r in results:
        print(
            f"{r.pods:>7} {r.rows:>8} {r.initial_ms:>12.1f} ms {r.dependents_ns:>10.0f} ns "
            f"{r.same_key_ns:>7.0f} ns {r.change_ns / 1000:>8.1f} us {r.rederived:>16.2f}"
        )
    first, last = results[0], results[-1]
    if len(results) > 1:
        print(
            f"ratio {last.pods} vs {first.pods} pods: "
            f"dependents() x{last.dependents_ns / first.dependents_ns:.2f} "
            f"(same key x{last.same_key_ns / first.same_key_ns:.2f}), "
            f"pod change x{last.change_ns / first.change_ns:.2f} "
            f"(initial derive x{last.initial_ms / first.initial_ms:.1f}, O(N) by design)"
        )


if __name__ == "__main__":
    main()
