"""Scenario scripts for the link reconciler, in the cilium/statedb `testdata/*.txtar` manner.

A script (tests/testdata/reconciler/*.txt) drives the real `TopologyTable`,
`DesiredLinks`, `LinkReconciler`, `WorkQueue` and `prune` against `FakeDriver`,
a kernel kept in a dict that logs every operation. Time is a `FakeClock`: a
backoff of a minute takes no wall time.

One command per line; `#` starts a comment line; indented lines are the block
of the command above them (what an `expect` command compares against).

    pod NAME...                       Topology objects without links
    link UID A:INTF[=IP] B:INTF[=IP]  the link on both pods' Topology (replaces uid UID)
    unlink UID                        the link leaves both Topology objects
    place POD NETNS                   CNI ADD: status.src_ip = this node, net_ns = NETNS
    unplace POD                       CNI DEL: placement cleared
    synced                            the informer's first list is in: derive, mark initialized
    iface NETNS NAME [MARK]           an interface already in the kernel (MARK: ns/uid)
    netns-gone NETNS                  a pod netns destroyed: its interfaces and their veth peers
    fail OP KEY [N|always] [spec]     the next N (1) OP (update|delete) calls on KEY fail
    settle                            run until no key is ready and none is in flight
    advance SECONDS                   move the clock on, then settle
    prune                             one prune pass over the netns of the placed pods
    restart                           the daemon dies and starts again: new tables, same kernel
    expect log                        the block is the driver log since the last `expect log`
    expect kernel                     the block is every interface: `NETNS NAME [MARK] #IFINDEX`
    expect health                     the block is every row's status, then `initial done|pending`

Log lines: `update(KEY)`, `delete(KEY)`, each with ` fail` when it raised,
`remove(NETNS NAME)` for each interface a prune pass removed, `prune(n=N)`
after a pass, `prune refused` before the initial reconciliation.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slot_helpers import HashedSlots

from meshwire.control.common.clock import FakeClock
from meshwire.control.common.queue import WorkQueue
from meshwire.control.common.retries import ExponentialBackoff
from meshwire.control.links.driver import OwnedInterface
from meshwire.control.links.driver_errors import LinkError, SpecError
from meshwire.control.links.iface_names import parse_mark
from meshwire.control.model.topology import Link, Topology, TopologyStatus
from meshwire.control.reconcile.derive import NodeView
from meshwire.control.reconcile.desired import DesiredLinks
from meshwire.control.reconcile.prune import PruneNotReady, prune
from meshwire.control.reconcile.reconciler import LinkReconciler
from meshwire.control.tables.health import State
from meshwire.control.tables.links import LinkRow, new_links_table
from meshwire.control.tables.topologies import TopologyTable

SCRIPTS = Path(__file__).parent / "testdata" / "reconciler"
NODE = NodeView(node_ip="169.254.0.11")
NAMESPACE = "default"
# Consecutive quiet checks before `settle` believes the reconciler is idle.
QUIET_CHECKS = 5
SETTLE_LIMIT = 5.0
# How long a `Pause` waits for its call, or for the test to let it go on.
PAUSE_LIMIT = 10.0


@dataclass
class FakeIface:
    mark: str  # "ns/uid", "" for an interface meshwire did not create
    ifindex: int
    # The kind of row that holds this pod end now ("" none yet): see links/podend.py.
    holder: str = ""


@dataclass
class Failure:
    op: str
    key: str
    times: int  # -1: always
    spec: bool


@dataclass
class FakeDriver:
    """A `LinkDriver` over a dict kernel, with the real drivers' ownership rules.

    `update` creates missing ends and keeps existing ones of the same link (same
    ifindex) and takes them over; a name held by an unmarked interface is a
    `SpecError`, by another link's a `LinkError`. `delete` and `remove` touch only
    marked interfaces, and `delete` leaves the ends in `keep` and those a row of
    another kind holds now. Each pod end is its own: a netns gone takes only its
    own interfaces.
    Called from the reconciler's pool threads, hence the lock.
    """

    kernel: dict[tuple[str, str], FakeIface] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    next_index: int = 1
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, netns: str, name: str, mark: str) -> None:
        with self.lock:
            self.kernel[(netns, name)] = FakeIface(mark, self.next_index)
            self.next_index += 1

    def update(self, row: LinkRow) -> None:
        with self.lock:
            self._maybe_fail("update", row)
            mark = f"{row.namespace}/{row.uid}"
            for end in row.ends():
                found = self.kernel.get((end.netns, end.intf))
                if found is None or found.mark == mark:
                    continue
                error = SpecError if not found.mark else LinkError
                self.log.append(f"update({row.key}) fail")
                raise error(mark, end.netns, end.intf, f"name is taken ({found.mark or 'foreign'})")
            for end in row.ends():
                if (end.netns, end.intf) not in self.kernel:
                    self.kernel[(end.netns, end.intf)] = FakeIface(mark, self.next_index)
                    self.next_index += 1
                self.kernel[(end.netns, end.intf)].holder = row.kind.value
            self.log.append(f"update({row.key})")

    def delete(self, row: LinkRow, keep: Collection[tuple[str, str]] = ()) -> None:
        with self.lock:
            self._maybe_fail("delete", row)
            mark = f"{row.namespace}/{row.uid}"
            for end in row.ends():
                found = self.kernel.get((end.netns, end.intf))
                if (
                    found is not None
                    and found.mark == mark
                    and (end.netns, end.intf) not in keep
                    and found.holder in ("", row.kind.value)
                ):
                    del self.kernel[(end.netns, end.intf)]
            self.log.append(f"delete({row.key})")

    def move(self, previous: LinkRow, row: LinkRow) -> None:
        self.delete(previous, {(end.netns, end.intf) for end in row.ends()})

    def owned(self, netns: str) -> list[OwnedInterface]:
        with self.lock:
            out = []
            for (ns, name), found in sorted(self.kernel.items()):
                mark = parse_mark(f"meshwire:{found.mark}") if found.mark else None
                if ns == netns and mark is not None:
                    out.append(OwnedInterface(name, found.ifindex, mark, "veth"))
            return out

    def remove(self, netns: str, ifname: str) -> None:
        with self.lock:
            found = self.kernel.get((netns, ifname))
            if found is not None and found.mark:
                del self.kernel[(netns, ifname)]
                self.log.append(f"remove({netns} {ifname})")

    def netns_gone(self, netns: str) -> None:
        with self.lock:
            for key in list(self.kernel):
                if key[0] == netns:
                    del self.kernel[key]

    def _maybe_fail(self, op: str, row: LinkRow) -> None:
        for failure in self.failures:
            if failure.op == op and failure.key == row.key and failure.times != 0:
                failure.times -= 1 if failure.times > 0 else 0
                self.log.append(f"{op}({row.key}) fail")
                error = SpecError if failure.spec else LinkError
                raise error(f"{row.namespace}/{row.uid}", row.local.netns, "", "injected")


class Pause:
    """Holds a driver call in its thread until the test has done its part."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.go = threading.Event()

    def around(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def paused(*args: Any) -> Any:
            if not self.reached.is_set():
                self.reached.set()
                assert self.go.wait(PAUSE_LIMIT), "the test never let the call go on"
            return call(*args)

        return paused

    async def wait_reached(self) -> None:
        assert await asyncio.to_thread(self.reached.wait, PAUSE_LIMIT), "the call was never made"


class Daemon:
    """The daemon's reconcile pipeline, as `daemon/app.py` wires it, minus I/O."""

    def __init__(
        self, driver: FakeDriver, clock: FakeClock, debounce: float = 0, concurrency: int = 1
    ) -> None:
        self.topologies = TopologyTable()
        self.links = new_links_table()
        self.desired = DesiredLinks(self.topologies, self.links, NODE, HashedSlots())
        self.queue = WorkQueue(clock=clock, debounce=debounce, limiter=ExponentialBackoff())
        # One worker by default: the log is then in a deterministic order.
        self.reconciler = LinkReconciler(self.links, driver, self.queue, concurrency=concurrency)
        self.task = asyncio.create_task(self.reconciler.run())

    def changed(self) -> None:
        """What the daemon's derive loop does on a topology change, once synced."""
        if self.links.initialized:
            self.desired.step()

    async def stop(self) -> None:
        # As the daemon does: close (no driver call starts after it), then cancel.
        self.reconciler.close()
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        self.desired.close()


class Scenario:
    def __init__(self, name: str, debounce: float = 0, concurrency: int = 1) -> None:
        self.name = name
        self.clock = FakeClock()
        self.driver = FakeDriver()
        self.api: dict[str, Topology] = {}
        self.daemon = Daemon(self.driver, self.clock, debounce, concurrency)
        self.logged = 0

    # -- the API side ---------------------------------------------------------

    def _store(self, topology: Topology) -> None:
        self.api[topology.key] = topology
        self.daemon.topologies.upsert(topology)
        self.daemon.changed()

    def _pod(self, name: str) -> Topology:
        key = f"{NAMESPACE}/{name}"
        assert key in self.api, f"{self.name}: pod {name} was never declared"
        return self.api[key]

    def cmd_pod(self, *names: str) -> None:
        for name in names:
            self._store(Topology(NAMESPACE, name))

    def cmd_link(self, uid: str, a: str, b: str) -> None:
        (a_pod, a_intf, a_ip), (b_pod, b_intf, b_ip) = _end(a), _end(b)
        self.set_link(a_pod, Link(int(uid), b_pod, a_intf, b_intf, a_ip, b_ip))
        self.set_link(b_pod, Link(int(uid), a_pod, b_intf, a_intf, b_ip, a_ip))

    def set_link(self, pod: str, link: Link) -> None:
        """`link` in `pod`'s Topology object only (its peer's stays as it is)."""
        topology = self._pod(pod)
        links = tuple(
            sorted([*(x for x in topology.links if x.uid != link.uid), link], key=lambda x: x.uid)
        )
        self._store(dataclasses.replace(topology, links=links))

    def cmd_unlink(self, uid: str) -> None:
        for topology in list(self.api.values()):
            if topology.link(int(uid)) is not None:
                links = tuple(x for x in topology.links if x.uid != int(uid))
                self._store(dataclasses.replace(topology, links=links))

    def cmd_place(self, pod: str, netns: str) -> None:
        status = TopologyStatus(src_ip=NODE.node_ip, net_ns=netns)
        self._store(dataclasses.replace(self._pod(pod), status=status))

    def cmd_unplace(self, pod: str) -> None:
        self._store(dataclasses.replace(self._pod(pod), status=TopologyStatus()))

    def cmd_synced(self) -> None:
        self.daemon.topologies.mark_initialized()
        self.daemon.desired.step()
        self.daemon.links.mark_initialized()

    # -- the kernel side ------------------------------------------------------

    def cmd_iface(self, netns: str, name: str, mark: str = "") -> None:
        self.driver.add(netns, name, mark)

    def cmd_netns_gone(self, netns: str) -> None:
        self.driver.netns_gone(netns)

    def cmd_fail(self, op: str, key: str, *options: str) -> None:
        times = 1
        for option in options:
            if option == "always":
                times = -1
            elif option.isdigit():
                times = int(option)
        self.driver.failures.append(Failure(op, key, times, "spec" in options))

    # -- time and passes ------------------------------------------------------

    async def cmd_settle(self) -> None:
        queue, quiet = self.daemon.queue, 0
        async with asyncio.timeout(SETTLE_LIMIT):
            while quiet < QUIET_CHECKS:
                await asyncio.sleep(0.002)
                deadline = self.clock.next_deadline()
                idle = queue.in_flight == 0 and (
                    queue.depth == 0 or (deadline is not None and deadline > self.clock.now())
                )
                quiet = quiet + 1 if idle else 0

    async def cmd_advance(self, seconds: str) -> None:
        self.clock.advance(float(seconds))
        await self.cmd_settle()

    async def cmd_prune(self) -> None:
        netns = {t.status.net_ns for t in self.api.values() if t.status.net_ns}
        try:
            removed = await prune(self.daemon.reconciler, self.driver, netns)
        except PruneNotReady:
            self.driver.log.append("prune refused")
            return
        self.driver.log.append(f"prune(n={removed})")

    async def cmd_restart(self) -> None:
        await self.daemon.stop()
        self.daemon = Daemon(self.driver, self.clock)
        for topology in self.api.values():
            self.daemon.topologies.upsert(topology)

    # -- expectations ---------------------------------------------------------

    def expect(self, what: str, block: list[str]) -> None:
        if what == "log":
            actual = self.driver.log[self.logged :]
            self.logged = len(self.driver.log)
        elif what == "kernel":
            actual = [
                " ".join(x for x in (ns, name, found.mark, f"#{found.ifindex}") if x)
                for (ns, name), found in sorted(self.driver.kernel.items())
            ]
        elif what == "health":
            reconciler = self.daemon.reconciler
            actual = []
            for key in sorted(self.daemon.links.keys()):
                health = self.daemon.links.health(key)
                line = f"{key} {health.state.value}"
                if health.state is State.ERROR:
                    line += f" attempts={health.attempts}" + (
                        " permanent" if health.permanent else ""
                    )
                actual.append(line)
            actual.append(f"initial {'done' if reconciler.initial_done.is_set() else 'pending'}")
        else:
            raise AssertionError(f"{self.name}: unknown expectation {what!r}")
        assert actual == block, f"{self.name}: expect {what}:\n" + _diff(block, actual)

    async def close(self) -> None:
        await self.daemon.stop()


def _end(text: str) -> tuple[str, str, str]:
    pod, _, rest = text.partition(":")
    intf, _, ip = rest.partition("=")
    return pod, intf, ip


def _diff(want: list[str], got: list[str]) -> str:
    return (
        "  want:\n"
        + "".join(f"    {x}\n" for x in want)
        + "  got:\n"
        + "".join(f"    {x}\n" for x in got)
    )


def parse(text: str) -> list[tuple[int, list[str], list[str]]]:
    """(line number, command words, block lines) per command of a script."""
    commands: list[tuple[int, list[str], list[str]]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if raw[0].isspace():
            assert commands, f"line {number}: a block line before any command"
            commands[-1][2].append(line.strip())
        else:
            commands.append((number, line.split(), []))
    return commands


async def run_script(name: str, text: str) -> None:
    """Run one scenario script; an assertion names the script, line and what differed."""
    scenario = Scenario(name)
    try:
        for number, words, block in parse(text):
            scenario.name = f"{name}:{number}"
            verb, args = words[0], words[1:]
            if verb == "expect":
                await scenario.cmd_settle()
                scenario.expect(args[0], block)
                continue
            method = getattr(scenario, "cmd_" + verb.replace("-", "_"), None)
            assert method is not None, f"{scenario.name}: unknown command {verb!r}"
            result = method(*args)
            if asyncio.iscoroutine(result):
                await result
    finally:
        await scenario.close()
