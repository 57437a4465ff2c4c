"""A pod's plumbing_error follows its links' health: rows' errors, wires' handshakes.

The publisher (daemon/plumbing_error.py) watches the links table's health:
there is no timer, so a health write reaches the status writer within a few
turns of the event loop, and clearing the error clears plumbing_error.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
from informer_helpers import wait_until
from links_helpers import veth_row
from reconciler_helpers import NODE, Scenario
from wire_helpers import NS, grpc_row, wire_nodes

from meshwire.control.daemon.plumbing_error import PlumbingErrors, pod_errors
from meshwire.control.model.topology import Topology, TopologyStatus
from meshwire.control.reconcile.rebuilds import Rebuilds
from meshwire.control.tables.health import PENDING
from meshwire.control.tables.links import POD_INDEX, LinksTable, new_links_table
from meshwire.control.tables.topologies import TopologyTable

# Event loop turns a write may take to reach the status writer: the watcher marks
# the pod, the publisher's task wakes on the next turn and hands the message over.
TURNS = 10
WAIT = 30.0


@dataclass
class Api:
    """The status writer and the API behind it: each write lands in the topologies
    table at once, as the informer would bring it back."""

    topologies: TopologyTable
    writes: list[tuple[str, str]] = field(default_factory=list)

    def set(self, pod: str, plumbing_error: str) -> None:
        self.writes.append((pod, plumbing_error))
        topology = self.topologies.get(pod)
        assert topology is not None
        status = dataclasses.replace(topology.status, plumbing_error=plumbing_error)
        self.topologies.upsert(dataclasses.replace(topology, status=status))


async def turns(done: Callable[[], bool]) -> bool:
    """Whether `done()` holds within TURNS turns of the event loop (no wall time)."""
    for _ in range(TURNS):
        if done():
            return True
        await asyncio.sleep(0)
    return done()


@dataclass
class Bare:
    links: LinksTable
    api: Api
    publisher: PlumbingErrors


@pytest.fixture
async def bare() -> AsyncIterator[Bare]:
    """A publisher over a links table no reconciler writes: the test writes the health."""
    topologies, links = TopologyTable(), new_links_table()
    placed = TopologyStatus(src_ip=NODE.node_ip, net_ns="/ns/r1")
    topologies.upsert(Topology("lab", "r1", status=placed))
    topologies.upsert(Topology("lab", "r2", status=dataclasses.replace(placed, net_ns="/ns/r2")))
    api = Api(topologies)
    publisher = PlumbingErrors(NODE.node_ip, topologies, links, Rebuilds(), api.set)
    task = asyncio.create_task(publisher.run())
    try:
        yield Bare(links, api, publisher)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        publisher.close()


async def test_a_status_write_reaches_plumbing_error_within_a_few_loop_turns(bare: Bare) -> None:
    links, api = bare.links, bare.api
    row = veth_row("/ns/r1", "/ns/r2")
    links.upsert(row.key, row)
    failed = PENDING.failed("eth1: name is taken (foreign)", permanent=True)

    links.set_health(row.key, failed)
    # A veth touches both pods: both say its error, with no timer to wait for.
    both = {("lab/r1", failed.message), ("lab/r2", failed.message)}
    assert await turns(lambda: set(api.writes) == both), api.writes

    api.writes.clear()
    links.set_health(row.key, PENDING.done())
    assert await turns(lambda: set(api.writes) == {("lab/r1", ""), ("lab/r2", "")}), api.writes

    # A write that changes nothing a pod says writes nothing.
    api.writes.clear()
    links.set_health(row.key, PENDING.done())
    assert not await turns(lambda: bool(api.writes))


async def test_writes_that_neither_are_nor_replace_an_error_recompute_nothing(
    bare: Bare, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 1,500-link pod coming up writes 1,500 verdicts: none may recompute the pod.
    links, publisher = bare.links, bare.publisher
    published: list[str] = []
    real = publisher._publish
    monkeypatch.setattr(publisher, "_publish", lambda pod: (published.append(pod), real(pod)))
    rows = [veth_row("/ns/r1", "/ns/r2", uid=uid) for uid in range(1, 51)]
    for row in rows:
        links.upsert(row.key, row)
    for row in rows:
        links.set_health(row.key, PENDING.done())
        await asyncio.sleep(0)
    assert not await turns(lambda: bool(published))

    links.set_health(rows[7].key, PENDING.failed("eth8: gone", permanent=False))
    assert await turns(lambda: sorted(set(published)) == ["lab/r1", "lab/r2"]), published
    published.clear()
    links.set_health(rows[7].key, PENDING.done())
    assert await turns(lambda: sorted(set(published)) == ["lab/r1", "lab/r2"]), published


async def test_a_closed_publisher_no_longer_hears_health_writes(bare: Bare) -> None:
    links, api = bare.links, bare.api
    row = veth_row("/ns/r1", "/ns/r2")
    links.upsert(row.key, row)
    bare.publisher.close()
    links.set_health(row.key, PENDING.failed("x", permanent=True))
    assert not await turns(lambda: bool(api.writes))


async def test_a_link_error_reaches_plumbing_error_and_its_repair_clears_it() -> None:
    # The reconciler, over the fake kernel, writes the health.
    scenario = Scenario("plumbing")
    daemon = scenario.daemon
    api = Api(daemon.topologies)
    publisher = PlumbingErrors(
        NODE.node_ip, daemon.topologies, daemon.links, daemon.desired.rebuilds, api.set
    )
    task = asyncio.create_task(publisher.run())
    try:
        scenario.cmd_pod("r1", "r2")
        scenario.cmd_link("1", "r1:eth1", "r2:eth1")
        scenario.cmd_place("r1", "/ns/r1")
        scenario.cmd_place("r2", "/ns/r2")
        scenario.driver.add("/ns/r1", "eth1", "")  # a foreign interface holds the name
        scenario.cmd_synced()
        await scenario.cmd_settle()
        keys = daemon.links.lookup(POD_INDEX, "default/r1")
        [error] = pod_errors(daemon.links, "default/r1")
        assert "foreign" in error

        def says(message: str) -> Callable[[], bool]:
            return lambda: all(
                (t := daemon.topologies.get(pod)) is not None and t.status.plumbing_error == message
                for pod in ("default/r1", "default/r2")
            )

        await wait_until(says(error), "both pods' plumbing_error names the foreign interface", WAIT)
        assert ("default/r1", error) in api.writes

        with scenario.driver.lock:
            del scenario.driver.kernel[("/ns/r1", "eth1")]
        daemon.reconciler.verify(keys)
        await scenario.cmd_settle()
        assert pod_errors(daemon.links, "default/r1") == []
        await wait_until(says(""), "the repaired link's error is cleared from plumbing_error", WAIT)
        assert api.writes[-2:] == [("default/r1", ""), ("default/r2", "")]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        publisher.close()
        await daemon.stop()


async def test_a_handshake_that_fails_after_its_row_is_done_reaches_plumbing_error() -> None:
    # r1's end of a wire is realised (its row done) while the peer node does not
    # answer: the reconciler writes nothing again, the handshake alone fails.
    with wire_nodes("a", "b") as (network, (a, b)):
        topologies, links = TopologyTable(), a.links
        placed = TopologyStatus(src_ip=a.ip, net_ns="/run/netns/r1")
        topologies.upsert(Topology(NS, "r1", status=placed))
        api = Api(topologies)
        publisher = PlumbingErrors(a.ip, topologies, links, Rebuilds(), api.set)
        task = asyncio.create_task(publisher.run())
        try:
            row = grpc_row(1, "r1", "r2", b.ip)
            links.upsert(row.key, row)
            links.set_health(row.key, PENDING.done())
            a.attach(row)
            network.down.add(b.ip)

            await a.handshake(b)
            [problem] = pod_errors(links, f"{NS}/r1")
            assert b.ip in problem
            assert await turns(lambda: api.writes == [(f"{NS}/r1", problem)]), api.writes

            network.down.discard(b.ip)
            b.attach(grpc_row(1, "r2", "r1", a.ip))
            await a.handshake(b)
            assert a.manager.ready(row.key)
            assert await turns(lambda: api.writes[-1:] == [(f"{NS}/r1", "")]), api.writes
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            publisher.close()
