"""Daemons claim namespace slots through the embedded API: distinct, agreed, freed.

Each `SlotKeeper` stands for one daemon (its own Topology view, its own API
client); they race on the one IdAllocation object, as daemons starting
together on a cluster do.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from derive_helpers import pod

from meshwire.control.common import slots
from meshwire.control.common.ids import UID_LIMIT, VNI_MAX, Slot, preferred_slot
from meshwire.control.common.retries import BackoffPolicy
from meshwire.control.daemon.slot_keeper import SlotKeeper
from meshwire.control.informer.client import make_api_client
from meshwire.control.tables.topologies import TopologyTable
from meshwire.tools.api.server import ApiServer

FAST = BackoffPolicy(initial=0.05, maximum=0.5)


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[ApiServer]:
    server = ApiServer(str(tmp_path / "api.db"), bookmark_interval=0.2)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


class Daemon:
    """A keeper with its own Topology view, running until `stop`."""

    def __init__(self, url: str, namespaces: list[str], release_grace: float = 30.0) -> None:
        self.url = url
        self.table = TopologyTable()
        for namespace in namespaces:
            self.table.upsert(pod("r1", namespace=namespace))
        self.table.mark_initialized()
        self.changed: set[str] = set()
        self.keeper = SlotKeeper(
            self.table,
            vni_base=5000,
            on_change=self.changed.update,
            backoff=FAST,
            release_grace=release_grace,
        )
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        client = await make_api_client(self.url, "")

        async def run() -> None:
            try:
                await self.keeper.run(client)
            finally:
                await client.close()  # type: ignore[no-untyped-call]

        self._task = asyncio.create_task(run())

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def until(condition: Callable[[], bool], within: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def stored(api: ApiServer) -> dict[str, Slot]:
    obj = api._id_store.get("", slots.NAME) if api._id_store else None
    return dict(slots.read(obj).slots)


async def test_daemons_claiming_at_once_get_distinct_slots_and_all_agree(api: ApiServer) -> None:
    namespaces = [f"lab{i}" for i in range(60)]  # lab25 and lab26 hash alike
    rng = random.Random(21)
    daemons = [Daemon(api.url, rng.sample(namespaces, 45)) for _ in range(5)]
    try:
        await asyncio.gather(*(d.start() for d in daemons))
        await until(lambda: set(stored(api)) == set(namespaces))
        final = stored(api)
        await until(lambda: all(dict(d.keeper.allocation.slots) == final for d in daemons))
    finally:
        await asyncio.gather(*(d.stop() for d in daemons))
    assert len({s.vni_slot for s in final.values()}) == len(namespaces)
    assert len({s.wire_slot for s in final.values()}) == len(namespaces)
    for daemon in daemons:
        assert all(daemon.keeper.slot_of(ns) == final[ns] for ns in namespaces)
    moved = {ns for ns, slot in final.items() if slot != preferred_slot(ns, 5000)}
    assert moved and moved <= {ns for ns in namespaces if _shares_hash(ns, namespaces)}


def _shares_hash(namespace: str, namespaces: list[str]) -> bool:
    mine = preferred_slot(namespace, 5000)
    others = [preferred_slot(ns, 5000) for ns in namespaces if ns != namespace]
    return any(o.vni_slot == mine.vni_slot or o.wire_slot == mine.wire_slot for o in others)


async def test_a_namespace_without_topologies_frees_its_slot_after_the_grace(
    api: ApiServer,
) -> None:
    daemon = Daemon(api.url, ["lab1", "lab2"], release_grace=0.3)
    # The watcher sees no Topology at all: with the same short grace it would free
    # lab1 too. It only watches the daemon's release here.
    watcher = Daemon(api.url, [], release_grace=30.0)
    try:
        await daemon.start()
        await watcher.start()
        await until(lambda: watcher.keeper.slot_of("lab2") is not None)
        daemon.table.delete("lab2/r1")
        await until(lambda: "lab2" not in stored(api))
        await until(lambda: watcher.keeper.slot_of("lab2") is None)
        assert "lab2" in watcher.changed
        assert set(stored(api)) == {"lab1"}
    finally:
        await daemon.stop()
        await watcher.stop()


async def test_a_namespace_back_within_the_grace_keeps_its_slot(api: ApiServer) -> None:
    daemon = Daemon(api.url, ["lab1"], release_grace=30.0)
    try:
        await daemon.start()
        await until(lambda: isinstance(daemon.keeper.slot_of("lab1"), Slot))
        before = daemon.keeper.slot_of("lab1")
        daemon.table.delete("lab1/r1")
        await asyncio.sleep(0.3)
        daemon.table.upsert(pod("r1", namespace="lab1"))
        await asyncio.sleep(0.3)
        assert daemon.keeper.slot_of("lab1") == before
        assert stored(api) == {"lab1": before}
    finally:
        await daemon.stop()


async def test_when_every_slot_is_held_the_namespace_gets_a_message_and_waits(
    api: ApiServer,
) -> None:
    one_slot = VNI_MAX - UID_LIMIT - 1  # leaves room for one namespace only
    first = Daemon(api.url, ["lab-a"])
    first.keeper.vni_base = one_slot
    try:
        await first.start()
        await until(lambda: isinstance(first.keeper.slot_of("lab-a"), Slot))
        first.table.upsert(pod("r1", namespace="lab-b"))
        await until(lambda: isinstance(first.keeper.slot_of("lab-b"), str))
        message = first.keeper.slot_of("lab-b")
        assert isinstance(message, str)
        assert "namespace lab-b has no VNI and wire id slot" in message
        assert "lab-b" in first.changed
        assert set(stored(api)) == {"lab-a"}
    finally:
        await first.stop()


async def test_a_stale_replace_is_a_conflict_and_a_bad_entry_is_refused(api: ApiServer) -> None:
    client = await make_api_client(api.url, "")
    try:
        from kubernetes.aio.client import CustomObjectsApi
        from kubernetes.aio.client.exceptions import ApiException

        objects = CustomObjectsApi(client)
        body = slots.render(slots.Allocation(), {"a": Slot(1, 2)})
        created = await objects.create_cluster_custom_object(
            slots.GROUP, slots.VERSION, slots.PLURAL, body
        )
        assert isinstance(created, dict)
        stale = slots.render(slots.read(created), {"a": Slot(1, 2), "b": Slot(3, 4)})
        await objects.replace_cluster_custom_object(
            slots.GROUP, slots.VERSION, slots.PLURAL, slots.NAME, stale
        )
        with pytest.raises(ApiException) as conflict:
            await objects.replace_cluster_custom_object(
                slots.GROUP, slots.VERSION, slots.PLURAL, slots.NAME, stale
            )
        assert conflict.value.status == 409
        bad = slots.render(slots.Allocation(), {})
        bad["spec"]["namespaces"]["c"] = {"vniSlot": -1, "wireSlot": 0}
        with pytest.raises(ApiException) as invalid:
            await objects.replace_cluster_custom_object(
                slots.GROUP, slots.VERSION, slots.PLURAL, slots.NAME, bad
            )
        assert invalid.value.status == 422
        assert "spec.namespaces.c.vniSlot" in str(invalid.value.body)
    finally:
        await client.close()  # type: ignore[no-untyped-call]
