"""The daemon's CNI handler before its first sync: an ADD or a DEL waits for it.

A daemon restarted while the runtime tears pods down gets DELs before its
informer has listed anything. Answering such a DEL from an empty table dropped
it: the pod's placement stayed, and its links on the peers' nodes with it.
"""

from __future__ import annotations

import asyncio

import pytest
from reconciler_helpers import NODE, Daemon, FakeDriver

from meshwire.control.cni.protocol import CniError, CniRequest, Command, PodRef
from meshwire.control.daemon.cni_handler import DaemonCniHandler
from meshwire.control.daemon.placements import PlacementKeeper
from meshwire.control.model.topology import Topology, TopologyStatus
from meshwire.control.reconcile.clock import FakeClock

R1 = Topology(
    "default", "r1", status=TopologyStatus(src_ip=NODE.node_ip, net_ns="/ns/r1", container_id="c1")
)
DEL = CniRequest(Command.DEL, "1.1.0", "meshnet", container_id="c1", pod=PodRef("default", "r1"))


class Written:
    """The status writes the handler makes (`set_status`)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str]]] = []

    def __call__(self, key: str, **fields: str) -> None:
        self.calls.append((key, fields))


def handler(daemon: Daemon, written: Written, add_timeout: float) -> DaemonCniHandler:
    return DaemonCniHandler(
        NODE.node_ip,
        daemon.topologies,
        daemon.desired,
        daemon.reconciler,
        written,
        add_timeout,
        lambda: "",
        PlacementKeeper(NODE.node_ip, daemon.topologies, written),
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
