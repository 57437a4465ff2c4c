"""The `Reflector` on its own, against the embedded API server, through the official client.

A recording handler stands in for the Topology table, the IdAllocation keeper
and the uninstall watch: what it is handed is a user's view of the resource
(every object listed, then each change once). The server's knobs break things
the way a cluster does: history compacted while the watch hangs (410, then a
relist), the server gone (failures waited out with the backoff, then the watch
resumed from the last resourceVersion, not relisted).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.aio.client import ApiClient

from meshwire.control.api.server import ApiServer
from meshwire.control.common.retries import BackoffPolicy
from meshwire.control.informer.client import make_api_client
from meshwire.control.informer.reflector import Reflector
from meshwire.control.informer.sources import CustomObjects
from meshwire.control.model.topology import GROUP, PLURAL, VERSION
from tests.informer_helpers import Cluster, Recorder, private_loopback, topology, wait_until

pytestmark = pytest.mark.timeout(60)

POLICY = BackoffPolicy(initial=0.05, maximum=0.2)


@pytest.fixture(autouse=True)
def _own_loopback() -> Iterator[None]:
    with private_loopback():
        yield


@contextlib.asynccontextmanager
async def serving(db: Path, port: int = 0) -> AsyncIterator[ApiServer]:
    server = ApiServer(str(db), port=port, bookmark_interval=0.2)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@contextlib.asynccontextmanager
async def client(url: str) -> AsyncIterator[ApiClient]:
    api = await make_api_client(url, "")
    try:
        yield api
    finally:
        await api.close()  # type: ignore[no-untyped-call]


@contextlib.asynccontextmanager
async def reflecting(reflector: Reflector) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(reflector.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def topologies(api: ApiClient, recorder: Recorder, **kwargs: Any) -> Reflector:
    source = CustomObjects(api, GROUP, VERSION, PLURAL)
    return Reflector(source, recorder, backoff=POLICY, request_timeout=2.0, **kwargs)


async def test_it_lists_then_hands_over_each_change_once(tmp_path: Path) -> None:
    async with serving(tmp_path / "api.db") as server, client(server.url) as api:
        cluster = Cluster(api)
        await cluster.create(topology("r1", "r2"))
        recorder = Recorder()
        reflector = topologies(api, recorder)
        async with reflecting(reflector):
            await wait_until(lambda: recorder.log == ["list ['r1']"], "the list")
            await cluster.create(topology("r2", "r1"))
            await cluster.set_src_ip("r1", "10.0.0.1")
            await cluster.delete("r2")
            want = ["list ['r1']", "ADDED r2", "MODIFIED r1", "DELETED r2"]
            await wait_until(lambda: recorder.log == want, f"{want}, not {recorder.log}")
            assert reflector.stats.lists == 1
            assert reflector.stats.last_error == ""


async def test_history_compacted_under_a_hung_watch_is_a_410_and_a_relist(tmp_path: Path) -> None:
    async with serving(tmp_path / "api.db") as server, client(server.url) as api:
        cluster = Cluster(api)
        await cluster.create(topology("r1"))
        recorder = Recorder()
        reflector = topologies(api, recorder)
        async with reflecting(reflector):
            await wait_until(lambda: recorder.take() == ["list ['r1']"], "the first list")
            server.hang_watches(True)
            await cluster.delete("r1")
            await cluster.create(topology("r2"))
            server.compact()
            server.hang_watches(False)
            # Deleted while nobody watched: the relist says so by leaving r1 out.
            await wait_until(lambda: "list ['r2']" in recorder.log, f"a relist: {recorder.log}")
            assert reflector.stats.relists == 1
            assert reflector.stats.events["ERROR"] >= 1


async def test_a_server_gone_is_waited_out_with_the_backoff_and_the_watch_resumed(
    tmp_path: Path,
) -> None:
    db = tmp_path / "api.db"
    async with serving(db) as first, client(first.url) as api:
        await Cluster(api).create(topology("r1"))
        delays: list[float] = []

        async def sleep(seconds: float) -> None:
            delays.append(seconds)
            await asyncio.sleep(seconds)

        recorder = Recorder()
        reflector = topologies(api, recorder, sleep=sleep)
        async with reflecting(reflector):
            await wait_until(lambda: recorder.take() == ["list ['r1']"], "the first list")
            await first.stop()
            await wait_until(lambda: len(delays) >= 3, "three failed reconnects")
            # Each failure waits longer, up to the policy's maximum.
            assert delays[:3] == [0.05, 0.1, 0.2]
            assert reflector.stats.last_error
            async with serving(db, first.port):
                await Cluster(api).create(topology("r2"))
                await wait_until(lambda: recorder.log == ["ADDED r2"], f"r2: {recorder.log}")
                assert reflector.stats.lists == 1  # resumed, not relisted
                await wait_until(lambda: reflector.stats.last_error == "", "the error cleared")


async def test_stop_from_the_handler_hands_over_nothing_after_it(tmp_path: Path) -> None:
    async with serving(tmp_path / "api.db") as server, client(server.url) as api:
        cluster = Cluster(api)
        recorder = Recorder()
        reflector = topologies(api, recorder)
        recorder.on_entry = lambda entry: reflector.stop() if entry == "ADDED r1" else None
        async with reflecting(reflector) as task:
            await wait_until(lambda: recorder.log == ["list []"], "the first list")
            await cluster.create(topology("r1"))
            await cluster.create(topology("r2"))
            await asyncio.wait_for(task, 30)
            await cluster.create(topology("r3"))
            assert recorder.log == ["list []", "ADDED r1"]


async def test_stop_from_outside_ends_a_waiting_watch(tmp_path: Path) -> None:
    async with serving(tmp_path / "api.db") as server, client(server.url) as api:
        recorder = Recorder()
        reflector = topologies(api, recorder)
        async with reflecting(reflector) as task:
            await wait_until(lambda: recorder.log == ["list []"], "the first list")
            reflector.stop()
            await asyncio.wait_for(task, 30)
            assert task.done() and task.exception() is None
