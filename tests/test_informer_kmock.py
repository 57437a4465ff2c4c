"""The informer against kmock 0.8's Kubernetes emulator: what it can check.

kmock serves the official client's list, watch, create, patch (of the object
and of its status subresource) and delete for a declared resource, so these
run here: the initial sync, streamed changes (a status patch included), an
unreadable object skipped, a watch that never ends abandoned after the client
timeout, a server without the CRD or refusing the permission (each said in
one line naming the fix), and a 410 (injected as an HTTP status and as an ERROR event) leading
to a relist whose diff emits the deletion the watch never reported.

What kmock 0.8 cannot check, and why; these scenarios run against the embedded
API (`test_informer_api.py`) instead:

- 410 after a real compaction: kmock keeps no history; the 410 is injected here, the
  real compaction is tested against the embedded API.
- API server restart: kmock's objects live in the memory of one emulator instance.
- an update by replace (PUT), as meshwire apply sends: kmock serves no PUT of an object
  or of its status (both answer 404), so apply's update path is checked against the
  embedded API only (test_api_apply.py).
- half-open watch, then recovery without a relist: kmock has no way to make a watch
  silent and then live again; its idle watch is abandoned by the client timeout
  (tested), but what follows is a replay.
- paged list (limit/continue): kmock ignores limit and continue and returns every object
  in one page.
- resume from the last resourceVersion: kmock lists report resourceVersion '...' and its
  objects carry none; every watch ignores resourceVersion and replays all objects as
  ADDED, so a resumed watch cannot be told from a replay.
- server timeoutSeconds and bookmarks: kmock ignores timeoutSeconds (a TODO in kmock)
  and never sends BOOKMARK events.
- watch dropped mid-stream: kmock cannot end an open watch: its watch streams until the
  client leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import kmock
import pytest
from kubernetes.aio.client import ApiClient

from meshwire.control.informer.client import make_api_client
from meshwire.control.model.topology import GROUP, PLURAL, VERSION
from tests.informer_helpers import (
    Cluster,
    RecordingSink,
    private_loopback,
    running,
    topology,
    wait_until,
)

pytestmark = pytest.mark.timeout(60)

TOPOLOGIES = kmock.resource(GROUP, VERSION, PLURAL)


@pytest.fixture(autouse=True)
def _own_loopback() -> Iterator[None]:
    with private_loopback():
        yield


@contextlib.asynccontextmanager
async def emulator(*objs: dict[str, Any], crd: bool = True) -> AsyncIterator[tuple[Any, ApiClient]]:
    """A kmock emulator serving `objs` (or, without `crd`, no Topology resource at all),
    and an official client pointed at it."""
    async with kmock.KubernetesEmulator() as km, kmock.Server(km) as server:
        if crd:
            km.resources[TOPOLOGIES] = kmock.ResourceInfo(namespaced=True, kind="Topology")
        for obj in objs:
            km.objects[TOPOLOGIES, "default", obj["metadata"]["name"]] = obj
        api = await make_api_client(str(server.url), "")
        try:
            yield km, api
        finally:
            await api.close()  # type: ignore[no-untyped-call]


def triangle() -> list[dict[str, Any]]:
    return [topology("r1", "r2", "r3"), topology("r2", "r1", "r3"), topology("r3", "r1", "r2")]


async def test_initial_sync_marks_the_table_initialized_after_the_list() -> None:
    async with emulator(*triangle()) as (_, api):
        sink = RecordingSink()
        async with running(api, sink) as informer:
            await asyncio.wait_for(informer.synced.wait(), 15)
            assert sink.take_log() == [
                "upsert default/r1",
                "upsert default/r2",
                "upsert default/r3",
                "initialized",
            ]
            assert sink.table.initialized


async def test_created_patched_and_deleted_objects_stream_into_the_table() -> None:
    async with emulator(*triangle()) as (_, api):
        cluster = Cluster(api)
        sink = RecordingSink()
        async with running(api, sink) as informer:
            await informer.synced.wait()
            sink.take_log()
            await cluster.create(topology("r4", "r1"))
            await cluster.relink("r2", "r1")
            await cluster.set_src_ip("r1", "10.0.0.1")
            await cluster.delete("r3")
            await wait_until(lambda: len(sink.log) >= 4, "four writes")
            assert sink.take_log() == [
                "upsert default/r4",
                "upsert default/r2",
                "upsert default/r1",
                "delete default/r3",
            ]
            assert sorted(sink.table.keys()) == ["default/r1", "default/r2", "default/r4"]
            r2 = sink.table.get("default/r2")
            assert r2 is not None and [link.peer_pod for link in r2.links] == ["r1"]
            r1 = sink.table.get("default/r1")
            assert r1 is not None and r1.status.src_ip == "10.0.0.1"


async def test_an_unreadable_object_is_skipped_and_the_rest_synced() -> None:
    broken = topology("bad", "r1")
    broken["spec"]["links"][0]["uid"] = "one"
    async with emulator(*triangle(), broken) as (_, api):
        sink = RecordingSink()
        async with running(api, sink) as informer:
            await informer.synced.wait()
            assert sorted(sink.table.keys()) == ["default/r1", "default/r2", "default/r3"]
            assert informer.stats.unreadable >= 1


async def test_a_watch_that_never_ends_is_abandoned_after_the_client_timeout() -> None:
    async with emulator(*triangle()) as (_, api):
        cluster = Cluster(api)
        sink = RecordingSink()
        async with running(api, sink) as informer:
            await informer.synced.wait()
            sink.take_log()
            await wait_until(lambda: informer.stats.reconnects >= 1, "the client timeout")
            await cluster.create(topology("r4"))
            await wait_until(lambda: "default/r4" in sink.table, "r4 after the reconnect")
            assert sink.take_log() == ["upsert default/r4"]


@pytest.mark.parametrize("how", ["http-status", "error-event"])
async def test_a_410_relists_and_deletes_what_the_watch_never_reported(how: str) -> None:
    async with emulator(*triangle()) as (km, api):
        if how == "http-status":
            km[kmock.action.WATCH, TOPOLOGIES][:1] << 410
        else:
            gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
            km[kmock.action.WATCH, TOPOLOGIES][:1] << {"type": "ERROR", "object": gone}
        sink = RecordingSink()
        # Gone from the server without a watch event: only a relist can notice.
        sink.after_initialized = lambda: km.objects.__delitem__((TOPOLOGIES, "default", "r3"))
        async with running(api, sink) as informer:
            await wait_until(lambda: informer.stats.relists == 1, "the relist")
            await wait_until(lambda: "default/r3" not in sink.table, "r3's deletion")
            assert sink.take_log() == [
                "upsert default/r1",
                "upsert default/r2",
                "upsert default/r3",
                "initialized",
                "delete default/r3",
            ]


async def test_an_api_server_without_the_crd_is_retried_and_said_to_need_it() -> None:
    async with emulator(crd=False) as (_, api):
        sink = RecordingSink()
        async with running(api, sink) as informer:
            await wait_until(lambda: informer.stats.reconnects >= 2, "two attempts")
            error = informer.stats.last_error
            assert error.startswith("404 ")
            assert "install the Topology CRD (deploy/crd.yaml)" in error
            assert "\n" not in error
            assert not informer.synced.is_set()


async def test_a_refused_list_names_the_permission_and_syncs_once_granted() -> None:
    refused = {
        "kind": "Status",
        "code": 403,
        "message": 'topologies.networkop.co.uk is forbidden: User "system:serviceaccount:'
        'meshwire:meshwire" cannot list resource "topologies"',
    }
    async with emulator(*triangle()) as (km, api):
        km[kmock.action.LIST, TOPOLOGIES][:1] << 403 << refused
        sink = RecordingSink()
        async with running(api, sink) as informer:
            await wait_until(lambda: informer.stats.reconnects >= 1, "the refused list")
            error = informer.stats.last_error
            assert error.startswith("403 Forbidden: topologies.networkop.co.uk is forbidden")
            assert "deploy/rbac.yaml" in error
            await asyncio.wait_for(informer.synced.wait(), 15)
            assert informer.stats.last_error == ""
