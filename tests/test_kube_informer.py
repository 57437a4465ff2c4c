"""The informer's recovery against a real kube-apiserver and etcd.

A private control plane (these tests kill, stop and compact it), started with
`--watch-cache=false` so that a watch is served by etcd itself: a compaction
then really expires old resourceVersions (with the watch cache a watch from an
old resourceVersion is answered from the cache's window). The bookmark test
uses the shared control plane (with the watch cache, which is what sends
bookmarks). v1.20 sent none here, with timeoutSeconds from 3 to 12 s (its
watch cache sends one only shortly before a watch's deadline; periodic
bookmarks came in later releases), so the test asserts what the informer
must do either way: watches that end are resumed from the
last resourceVersion seen, without a relist and without replaying a change.

Each test ends with the table equal to the server's state, and asserts the
sink's log of writes: one write per real change, none lost, none doubled.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from kubernetes.aio.client import ApiClient

from meshwire.control.informer.client import make_api_client
from meshwire.control.informer.informer import InformerOptions
from meshwire.control.reconcile.retries import BackoffPolicy
from tests.informer_helpers import Cluster, RecordingSink, running, server_state, topology
from tests.kube_cluster import ControlPlane
from tests.kube_helpers import (
    Gate,
    admin,
    create_namespace,
    install_crd,
    uninstall_crd,
    unique,
)
from tests.paths import REPO

pytestmark = pytest.mark.root

WAIT = 60.0
# Short server-side watches and client timeouts so that a half-open server is
# noticed within seconds; fast reconnects.
OPTIONS = InformerOptions(
    page_size=2,
    request_timeout=3.0,
    watch_timeout=3,
    backoff=BackoffPolicy(initial=0.05, maximum=0.5, reset_after=60.0),
)


@pytest.fixture(scope="module")
def plane(kube_assets: Path) -> Iterator[ControlPlane]:
    private = ControlPlane(kube_assets, watch_cache=False)
    private.start()
    try:
        api = admin(private)
        install_crd(api, REPO / "deploy" / "crd.yaml")
        api.close()
        yield private
    finally:
        private.stop()


@pytest.fixture
async def api(plane: ControlPlane) -> AsyncIterator[ApiClient]:
    client = await make_api_client("", str(plane.admin_kubeconfig))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def namespace(plane: ControlPlane) -> str:
    # The private plane is thrown away whole: no cleanup of its namespaces.
    api = admin(plane)
    try:
        return create_namespace(api, unique("mw-inf"))
    finally:
        api.close()


async def wait_for(condition: object, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while True:
        result = condition()  # type: ignore[operator]
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {WAIT}s waiting for {what}")
        await asyncio.sleep(0.05)


async def converge(sink: RecordingSink, api: ApiClient) -> None:
    """Until the table equals the server's state (asserted, to show the difference)."""
    last: dict[str, object] = {}

    async def equal() -> bool:
        nonlocal last
        last = await server_state(api)
        return sink.state() == last

    try:
        await wait_for(equal, "the table to equal the server's state")
    except AssertionError:
        assert sink.state() == last
        raise


async def seed(cluster: Cluster, namespace: str) -> None:
    for name, peer in (("a", "b"), ("b", "a"), ("c", "a"), ("d", "a")):
        await cluster.create(topology(name, peer, namespace=namespace))


async def change(cluster: Cluster, namespace: str) -> list[str]:
    """One of each change; returns the sink writes they must cause, sorted."""
    await cluster.create(topology("e", "a", namespace=namespace))
    await cluster.relink("b", "a", "c")
    await cluster.set_src_ip("c", "169.254.0.11")
    await cluster.delete("d")
    return sorted(f"{op} {namespace}/{name}" for op, name in (
        ("upsert", "e"), ("upsert", "b"), ("upsert", "c"), ("delete", "d")))  # fmt: skip


async def test_apiserver_killed_and_restarted(
    plane: ControlPlane, api: ApiClient, namespace: str
) -> None:
    cluster = Cluster(api, namespace)
    await seed(cluster, namespace)
    sink = RecordingSink()
    async with running(api, sink, OPTIONS) as informer:
        await converge(sink, api)
        sink.take_log()
        plane.kill_apiserver()
        await wait_for(lambda: informer.stats.reconnects > 0, "the informer to notice")
        await asyncio.to_thread(plane.start_apiserver)
        expected = await change(cluster, namespace)
        await converge(sink, api)
        assert sorted(sink.take_log()) == expected


async def test_compacted_while_disconnected_relists_without_losing_or_doubling(
    plane: ControlPlane, api: ApiClient, namespace: str, tmp_path: Path
) -> None:
    cluster = Cluster(api, namespace)
    await seed(cluster, namespace)
    gate = Gate(plane.host, (plane.host, plane.port))
    await gate.open()
    config = plane.admin_kubeconfig_for(tmp_path / "gated", f"https://{plane.host}:{gate.port}")
    gated = await make_api_client("", str(config))
    sink = RecordingSink()
    try:
        async with running(gated, sink, OPTIONS) as informer:
            await converge(sink, api)
            sink.take_log()
            lists = informer.stats.lists
            await gate.close()
            expected = await change(cluster, namespace)
            await asyncio.to_thread(plane.compact)
            await gate.open()
            await converge(sink, api)
            assert sorted(sink.take_log()) == expected
            # It came back through a 410 and a relist, not a resumed watch.
            assert informer.stats.lists == lists + 1
            assert informer.stats.relists >= 1
    finally:
        await gated.close()
        await gate.close()


async def test_apiserver_stopped_then_continued(
    plane: ControlPlane, api: ApiClient, namespace: str
) -> None:
    cluster = Cluster(api, namespace)
    await seed(cluster, namespace)
    sink = RecordingSink()
    async with running(api, sink, OPTIONS) as informer:
        await converge(sink, api)
        sink.take_log()
        reconnects = informer.stats.reconnects
        plane.pause_apiserver()
        try:
            # A half-open server: the watch's client timeout ends the wait.
            await wait_for(
                lambda: informer.stats.reconnects > reconnects, "the informer to give up the watch"
            )
        finally:
            plane.resume_apiserver()
        expected = await change(cluster, namespace)
        await converge(sink, api)
        assert sorted(sink.take_log()) == expected


async def test_watches_ending_are_resumed_without_replays(kube: ControlPlane) -> None:
    admin_api = admin(kube)
    try:
        install_crd(admin_api, REPO / "deploy" / "crd.yaml")
        namespace = create_namespace(admin_api, unique("mw-bm"))
    except Exception:
        admin_api.close()
        raise
    api = await make_api_client("", str(kube.admin_kubeconfig))
    try:
        cluster = Cluster(api, namespace)
        await seed(cluster, namespace)
        sink = RecordingSink()
        async with running(api, sink, OPTIONS) as informer:
            await converge(sink, api)
            sink.take_log()
            expected = await change(cluster, namespace)
            await converge(sink, api)
            watches = informer.stats.events["ADDED"] + informer.stats.events["MODIFIED"]
            # Let a few watches end (3 s each) and be resumed from where the last stopped.
            await asyncio.sleep(10)
            # None replayed a change, none relisted.
            assert informer.stats.events["ADDED"] + informer.stats.events["MODIFIED"] == watches
            assert sorted(sink.take_log()) == expected
            assert informer.stats.relists == 0
            assert informer.stats.reconnects == 0
    finally:
        await api.close()
        uninstall_crd(admin_api)
        admin_api.close()
