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
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import kubernetes.client
import pytest
from kubernetes.aio.client import ApiClient

from meshwire.control.common.retries import BackoffPolicy
from meshwire.control.informer.client import make_api_client
from meshwire.control.informer.informer import Informer, InformerOptions
from meshwire.control.informer.reflector import Reflector
from meshwire.control.informer.sources import Namespace
from tests.informer_helpers import (
    Cluster,
    Recorder,
    RecordingSink,
    running,
    topology,
    wait_converged,
    wait_until,
)
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


async def wait_for(condition: Callable[[], bool], what: str) -> None:
    await wait_until(condition, what, WAIT)


async def converge(sink: RecordingSink, api: ApiClient) -> None:
    """Until the table equals the server's state (asserted, to show the difference)."""
    await wait_converged(sink, api, WAIT)


async def seed(cluster: Cluster, namespace: str) -> None:
    for name, peer in (("a", "b"), ("b", "a"), ("c", "a"), ("d", "a")):
        await cluster.create(topology(name, peer, namespace=namespace))


@dataclass
class Seeded:
    cluster: Cluster
    sink: RecordingSink
    informer: Informer


@contextlib.asynccontextmanager
async def seeded(
    api: ApiClient, namespace: str, through: ApiClient | None = None
) -> AsyncIterator[Seeded]:
    """The seed Topology objects, made with `api`, and an informer over `through`
    (`api` unless given) whose table holds them; its log of writes starts empty."""
    cluster = Cluster(api, namespace)
    await seed(cluster, namespace)
    sink = RecordingSink()
    async with running(through or api, sink, OPTIONS) as informer:
        await converge(sink, api)
        sink.take_log()
        yield Seeded(cluster, sink, informer)


async def arrived(sink: RecordingSink, api: ApiClient, expected: list[str]) -> None:
    """The table equals the server's state again, and got exactly the writes `expected`."""
    await converge(sink, api)
    assert sorted(sink.take_log()) == expected


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
    async with seeded(api, namespace) as lab:
        plane.kill_apiserver()
        await wait_for(lambda: lab.informer.stats.reconnects > 0, "the informer to notice")
        await asyncio.to_thread(plane.start_apiserver)
        await arrived(lab.sink, api, await change(lab.cluster, namespace))


async def test_compacted_while_disconnected_relists_without_losing_or_doubling(
    plane: ControlPlane, api: ApiClient, namespace: str, tmp_path: Path
) -> None:
    gate = Gate(plane.host, (plane.host, plane.port))
    await gate.open()
    config = plane.admin_kubeconfig_for(tmp_path / "gated", f"https://{plane.host}:{gate.port}")
    gated = await make_api_client("", str(config))
    try:
        async with seeded(api, namespace, through=gated) as lab:
            lists = lab.informer.stats.lists
            await gate.close()
            expected = await change(lab.cluster, namespace)
            await asyncio.to_thread(plane.compact)
            await gate.open()
            await arrived(lab.sink, api, expected)
            # It came back through a 410 and a relist, not a resumed watch.
            assert lab.informer.stats.lists == lists + 1
            assert lab.informer.stats.relists >= 1
    finally:
        await gated.close()
        await gate.close()


async def test_apiserver_stopped_then_continued(
    plane: ControlPlane, api: ApiClient, namespace: str
) -> None:
    async with seeded(api, namespace) as lab:
        reconnects = lab.informer.stats.reconnects
        plane.pause_apiserver()
        try:
            # A half-open server: the watch's client timeout ends the wait.
            await wait_for(
                lambda: lab.informer.stats.reconnects > reconnects,
                "the informer to give up the watch",
            )
        finally:
            plane.resume_apiserver()
        await arrived(lab.sink, api, await change(lab.cluster, namespace))


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
        async with seeded(api, namespace) as lab:
            expected = await change(lab.cluster, namespace)
            await converge(lab.sink, api)
            stats = lab.informer.stats
            watches = stats.events["ADDED"] + stats.events["MODIFIED"]
            # Let a few watches end (3 s each) and be resumed from where the last stopped.
            await asyncio.sleep(10)
            # None replayed a change, none relisted.
            assert stats.events["ADDED"] + stats.events["MODIFIED"] == watches
            assert sorted(lab.sink.take_log()) == expected
            assert stats.relists == 0
            assert stats.reconnects == 0
    finally:
        await api.close()
        uninstall_crd(admin_api)
        admin_api.close()


async def test_the_reflector_alone_relists_after_a_compaction_and_stops(
    plane: ControlPlane, api: ApiClient, tmp_path: Path
) -> None:
    # The uninstall watch's resource: one namespace, by name, absent at first.
    name = unique("mw-refl")
    gate = Gate(plane.host, (plane.host, plane.port))
    await gate.open()
    config = plane.admin_kubeconfig_for(tmp_path / "gated", f"https://{plane.host}:{gate.port}")
    gated = await make_api_client("", str(config))
    recorder = Recorder()
    reflector = Reflector(
        Namespace(gated, name),
        recorder,
        request_timeout=OPTIONS.request_timeout,
        watch_timeout=OPTIONS.watch_timeout,
        backoff=OPTIONS.backoff,
    )
    task = asyncio.create_task(reflector.run())
    try:
        await wait_for(lambda: recorder.log == ["list []"], "the first list")
        await gate.close()
        await wait_for(lambda: reflector.stats.reconnects > 0, "a failure, waited out")
        admin_api = admin(plane)
        try:
            await asyncio.to_thread(create_namespace, admin_api, name)
            # One more write, so that the compaction also removes the revision right
            # after the one the reflector holds (where its watch would start).
            await asyncio.to_thread(
                kubernetes.client.CoreV1Api(admin_api).patch_namespace,
                name,
                {"metadata": {"labels": {"compacted": "past-it"}}},
            )
        finally:
            admin_api.close()
        await asyncio.to_thread(plane.compact)
        await gate.open()
        # Resumed from a compacted resourceVersion: a 410, and the relist finds it.
        await wait_for(lambda: recorder.log[-1:] == [f"list [{name!r}]"], "the relist")
        assert reflector.stats.relists == 1

        reflector.stop()
        await asyncio.wait_for(task, WAIT)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await gated.close()
        await gate.close()
