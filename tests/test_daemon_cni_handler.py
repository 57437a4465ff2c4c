"""The daemon's CNI handler before its first sync: an ADD or a DEL waits for it.

A daemon restarted while the runtime tears pods down gets DELs before its
informer has listed anything. Answering such a DEL from an empty table dropped
it: the pod's placement stayed, and its links on the peers' nodes with it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from derive_helpers import pair
from reconciler_helpers import NODE, Daemon, FakeDriver
from slot_helpers import HashedSlots
from wire_helpers import grpc_row

from meshwire.control.cni.protocol import (
    Attachment,
    CniError,
    CniRequest,
    Command,
    ErrorCode,
    PodRef,
)
from meshwire.control.common.clock import FakeClock
from meshwire.control.daemon.cni_handler import DaemonCniHandler
from meshwire.control.daemon.placements import PlacementKeeper
from meshwire.control.daemon.sandbox_store import Sandbox, SandboxStore
from meshwire.control.links.netns import identity_of
from meshwire.control.model.topology import Topology, TopologyStatus
from meshwire.control.tables.health import PENDING

R1 = Topology(
    "default", "r1", status=TopologyStatus(src_ip=NODE.node_ip, net_ns="/ns/r1", container_id="c1")
)
DEL = CniRequest(Command.DEL, "1.1.0", "meshnet", container_id="c1", pod=PodRef("default", "r1"))


class Written:
    """The status writer as the handler sees it: records each `set`; every write lands
    at once unless `held` (then `written` waits until it is released)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str | None]]] = []
        self.held = asyncio.Event()
        self.held.set()

    def set(self, key: str, if_container: str | None = None, **fields: str) -> None:
        recorded: dict[str, str | None] = dict(fields)
        if if_container is not None:
            recorded = {"if_container": if_container, **recorded}
        self.calls.append((key, recorded))

    async def written(self, key: str) -> None:
        await self.held.wait()


def handler(
    daemon: Daemon,
    written: Written,
    add_timeout: float,
    store: SandboxStore | None = None,
) -> DaemonCniHandler:
    return DaemonCniHandler(
        NODE.node_ip,
        daemon.topologies,
        daemon.desired,
        daemon.reconciler,
        written,
        add_timeout,
        lambda: "",
        PlacementKeeper(NODE.node_ip, daemon.topologies, written.set, store),
    )


async def test_a_del_before_the_first_sync_waits_for_it_and_clears_the_placement() -> None:
    daemon, written = Daemon(FakeDriver(), FakeClock()), Written()
    try:
        deleting = asyncio.create_task(handler(daemon, written, 10.0).delete(DEL))
        await asyncio.sleep(0.05)
        assert not deleting.done()

        daemon.topologies.upsert(R1)
        daemon.topologies.mark_initialized()
        await asyncio.wait_for(deleting, 10.0)

        # Cleared only while the API's status still names the deleted container.
        cleared = {"if_container": "c1", "src_ip": "", "net_ns": "", "container_id": ""}
        assert written.calls == [("default/r1", cleared)]
        r1 = daemon.topologies.get("default/r1")
        assert r1 is not None and r1.status.src_ip == ""
    finally:
        await daemon.stop()


async def test_a_del_while_the_sync_does_not_come_asks_to_be_retried() -> None:
    daemon, written = Daemon(FakeDriver(), FakeClock()), Written()
    try:
        with pytest.raises(CniError) as refused:
            await handler(daemon, written, 0.05).delete(DEL)
        assert "not synced" in str(refused.value)
        assert written.calls == []
    finally:
        await daemon.stop()


ADD = CniRequest(
    Command.ADD,
    "1.1.0",
    "meshnet",
    container_id="c2",
    netns="/ns/r1-2",
    pod=PodRef("default", "r1"),
)


@pytest.mark.parametrize("request_", [ADD, DEL], ids=["ADD", "DEL"])
async def test_success_waits_until_the_status_write_is_in_the_api(request_: CniRequest) -> None:
    # Until then a daemon restarted a moment later would not know the placement
    # (ADD), or would still see the deleted container as running here (DEL).
    daemon, written = Daemon(FakeDriver(), FakeClock()), Written()
    daemon.topologies.upsert(R1)
    daemon.topologies.mark_initialized()
    daemon.links.mark_initialized()
    deriving = asyncio.create_task(derive_loop(daemon))
    cni = handler(daemon, written, 0.2)
    run = cni.add if request_ is ADD else cni.delete
    try:
        written.held.clear()
        with pytest.raises(CniError) as refused:
            await run(request_)
        assert refused.value.code == ErrorCode.TRY_AGAIN_LATER
        assert "status not written to the API within 0.2s" in str(refused.value)

        # The runtime retries; this time the write lands.
        written.held.set()
        await asyncio.wait_for(run(request_), 5.0)
        assert len(written.calls) == 2
    finally:
        deriving.cancel()
        await daemon.stop()


DEL2 = dataclasses.replace(DEL, container_id="c2")


async def test_an_add_or_del_recorded_in_the_sandbox_store_succeeds_while_the_write_is_late(
    tmp_path: Path,
) -> None:
    # The API is down: the pod runs, and the store carries its placement over a restart.
    daemon, written = Daemon(FakeDriver(), FakeClock()), Written()
    daemon.topologies.upsert(R1)
    daemon.topologies.mark_initialized()
    daemon.links.mark_initialized()
    deriving = asyncio.create_task(derive_loop(daemon))
    store, netns = SandboxStore(tmp_path / "state"), tmp_path / "r1-2"
    netns.touch()
    add = dataclasses.replace(ADD, netns=str(netns))
    try:
        written.held.clear()
        await asyncio.wait_for(handler(daemon, written, 0.2, store).add(add), 5.0)
        identity = identity_of(str(netns))
        assert store.load() == {"default/r1": Sandbox("c2", str(netns), "meshnet", identity)}
        assert written.calls[-1] == (
            "default/r1",
            {"src_ip": NODE.node_ip, "net_ns": str(netns), "container_id": "c2"},
        )

        # The runtime stops the pod while the API is still down: the DEL succeeds too,
        # the store remembering it.
        await asyncio.wait_for(handler(daemon, written, 0.2, store).delete(DEL2), 5.0)
        assert store.load() == {}
        assert store.load_deleted() == {("default/r1", "c2")}

        # A store that cannot record it: the runtime is asked to retry, as without one.
        (tmp_path / "file").touch()
        unwritable = handler(daemon, written, 0.2, SandboxStore(tmp_path / "file"))
        for command in (unwritable.add(add), unwritable.delete(DEL2)):
            with pytest.raises(CniError) as refused:
                await command
            assert refused.value.code == ErrorCode.TRY_AGAIN_LATER
    finally:
        deriving.cancel()
        await daemon.stop()


async def derive_loop(daemon: Daemon) -> None:
    """The daemon's derive loop: r1 has no links, so an ADD has nothing else to wait for."""
    while True:
        daemon.changed()
        await daemon.desired.wait()


def gc(network: str, *valid: str) -> CniRequest:
    attachments = tuple(Attachment(cid, "eth0") for cid in valid)
    return CniRequest(Command.GC, "1.1.0", network, valid_attachments=attachments)


async def test_gc_releases_a_sandbox_the_runtime_no_longer_lists_as_a_del_would() -> None:
    # The runtime gave up on r1's DEL (c1); its GC lists only r2's sandbox (c2).
    r2_status = TopologyStatus(src_ip=NODE.node_ip, net_ns="/ns/r2", container_id="c2")
    r2 = Topology("default", "r2", status=r2_status)
    daemon, written = Daemon(FakeDriver(), FakeClock()), Written()
    daemon.topologies.upsert(R1)
    daemon.topologies.upsert(r2)
    daemon.topologies.mark_initialized()
    cni = handler(daemon, written, 5.0)
    try:
        cni.placements.seed()
        cni.placements.added("default/r1", "c1", "/ns/r1", "meshnet")
        cni.placements.added("default/r2", "c2", "/ns/r2", "meshnet")
        await cni.gc(gc("meshnet", "c2"))

        cleared = {"if_container": "c1", "src_ip": "", "net_ns": "", "container_id": ""}
        assert written.calls == [("default/r1", cleared)]
        assert cni.placements.held("default/r1") is None
        assert cni.placements.held("default/r2") is not None
    finally:
        await daemon.stop()


async def test_gc_of_another_network_or_of_an_unknown_one_releases_nothing() -> None:
    daemon, written = Daemon(FakeDriver(), FakeClock()), Written()
    daemon.topologies.upsert(R1)
    daemon.topologies.mark_initialized()
    cni = handler(daemon, written, 5.0)
    try:
        cni.placements.seed()  # r1 held from the API: its network is not known
        await cni.gc(gc("meshnet"))
        cni.placements.added("default/r1", "c1", "/ns/r1", "other")
        await cni.gc(gc("meshnet"))
        assert written.calls == []
        assert cni.placements.held("default/r1") is not None
    finally:
        await daemon.stop()


async def test_check_says_the_same_errors_as_plumbing_error_a_wires_handshake_included() -> None:
    # plumbing_error lists derivation's problems, the rows' errors and the wires'
    # failed handshakes (daemon/plumbing_error.py); CHECK says the same list.
    daemon, written = Daemon(FakeDriver(), FakeClock()), Written()
    daemon.topologies.upsert(R1)
    daemon.topologies.mark_initialized()
    daemon.links.mark_initialized()
    row = dataclasses.replace(grpc_row(1, "r1", "r2", "10.99.0.2"), namespace="default")
    daemon.links.upsert(row.key, row)
    handshake = "handshake with node2 failed: DEADLINE_EXCEEDED"
    daemon.links.set_health(row.key, PENDING.done().with_handshake(handshake))
    cni = handler(daemon, written, 1.0)
    check = dataclasses.replace(DEL, command=Command.CHECK)
    try:
        with pytest.raises(CniError) as failed:
            await cni.check(check)
        assert failed.value.code == ErrorCode.INTERNAL
        assert f"link default/1: {handshake}" in str(failed.value)
        # Without the wire's error the same pod is only not realised yet.
        daemon.links.set_health(row.key, PENDING)
        with pytest.raises(CniError) as pending:
            await cni.check(check)
        assert pending.value.code == ErrorCode.TRY_AGAIN_LATER
    finally:
        await daemon.stop()


class NoSlotYet:
    """A `SlotSource` before the namespace's id slot is claimed."""

    def slot_of(self, namespace: str) -> None:
        return None


async def test_an_add_waits_for_a_link_across_nodes_until_its_namespace_has_ids() -> None:
    # r1's link to r2 on another node is due, but its vxlan id comes from the
    # namespace's slot: answering before the link exists would start the pod
    # without its interface.
    r1_end, r2_end = pair(1, "r1", "r2")
    elsewhere = TopologyStatus(src_ip="10.99.0.2", net_ns="/ns/r2", container_id="c9")
    daemon, written = Daemon(FakeDriver(), FakeClock()), Written()
    daemon.topologies.upsert(dataclasses.replace(R1, links=(r1_end,)))
    daemon.topologies.upsert(Topology("default", "r2", links=(r2_end,), status=elsewhere))
    daemon.topologies.mark_initialized()
    daemon.links.mark_initialized()
    daemon.desired.slots = NoSlotYet()
    deriving = asyncio.create_task(derive_loop(daemon))
    try:
        with pytest.raises(CniError) as refused:
            await handler(daemon, written, 0.2).add(ADD)
        assert refused.value.code == ErrorCode.TRY_AGAIN_LATER
        assert "links across nodes wait for namespace default's ids" in str(refused.value)
        assert daemon.links.keys() == []

        # The runtime retries; the slot comes while it waits.
        adding = asyncio.create_task(handler(daemon, written, 10.0).add(ADD))
        await asyncio.sleep(0.05)
        assert not adding.done()
        told: list[bool] = []  # what the waiting ADD sleeps on: a health write of its pod
        stop = daemon.links.watch_health(lambda pods, errors: told.append(errors), "default/r1")
        daemon.desired.slots = HashedSlots()
        daemon.desired.rederive_namespaces({"default"})
        stop()
        assert told
        await asyncio.wait_for(adding, 10.0)
        assert daemon.links.keys() == ["default/1/r1"]  # r1's vxlan end
    finally:
        deriving.cancel()
        await daemon.stop()
