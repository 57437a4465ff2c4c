"""The informer against the embedded API server, through the official client.

Each scenario ends with the table equal to the server's state, and asserts the
log of writes the table saw: every change once, nothing for an unchanged
object. The server's test knobs break the connection the ways a real cluster
does: watches dropped, history compacted (410), the server restarted, a
half-open watch that never answers. The informer reaches the server by URL
(the embedded mode's `api.url`) or through a kubeconfig (`api.kubeconfig`), as
on a real cluster.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvloop

from meshwire.control.informer.client import ApiConfigError, make_api_client
from tests.informer_helpers import (
    FAST,
    Cluster,
    RecordingSink,
    client,
    private_loopback,
    running,
    serving,
    topology,
    wait_converged,
    wait_until,
)
from tests.kubeconfigs import write_kubeconfig

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _own_loopback() -> Iterator[None]:
    with private_loopback():
        yield


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "api.sqlite"


async def lab(cluster: Cluster) -> None:
    """Three pods in a triangle, as a user would apply them."""
    await cluster.create(topology("r1", "r2", "r3"))
    await cluster.create(topology("r2", "r1", "r3"))
    await cluster.create(topology("r3", "r1", "r2"))


async def test_synced_only_once_the_first_list_is_in_the_table(db: Path) -> None:
    async with serving(db) as server, client(server.url) as api:
        await lab(Cluster(api))
        sink = RecordingSink()
        server.set_delay(0.3)
        async with running(api, sink) as informer:
            await asyncio.sleep(0)
            assert not informer.synced.is_set()
            assert not sink.table.initialized
            await asyncio.wait_for(informer.synced.wait(), 15)
            assert sink.take_log() == [
                "upsert default/r1",
                "upsert default/r2",
                "upsert default/r3",
                "initialized",
            ]
            server.set_delay(0)
            await wait_converged(sink, api)
            assert informer.stats.lists == 1


async def test_creates_updates_and_deletes_stream_into_the_table_once_each(db: Path) -> None:
    async with serving(db) as server, client(server.url) as api:
        cluster = Cluster(api)
        await lab(cluster)
        sink = RecordingSink()
        async with running(api, sink) as informer:
            await informer.synced.wait()
            sink.take_log()
            await cluster.create(topology("r4", "r1"))
            await cluster.set_src_ip("r1", "10.0.0.1")
            await cluster.relink("r2", "r1")
            await cluster.delete("r3")
            await wait_until(lambda: len(sink.log) >= 4, "four writes")
            await wait_converged(sink, api)
            assert sink.take_log() == [
                "upsert default/r4",
                "upsert default/r1",
                "upsert default/r2",
                "delete default/r3",
            ]
            assert informer.stats.events["DELETED"] == 1
            assert informer.stats.lists == 1


async def test_a_watch_dropped_mid_stream_resumes_without_a_relist(db: Path) -> None:
    async with serving(db) as server, client(server.url) as api:
        cluster = Cluster(api)
        await lab(cluster)
        sink = RecordingSink()
        async with running(api, sink) as informer:
            await informer.synced.wait()
            sink.take_log()
            await cluster.set_src_ip("r1", "10.0.0.1")
            await wait_until(lambda: len(sink.log) == 1, "the first update")
            server.drop_watches()
            await cluster.set_src_ip("r2", "10.0.0.2")
            await cluster.delete("r3")
            await wait_until(lambda: len(sink.log) >= 3, "the changes after the drop")
            await wait_converged(sink, api)
            assert sink.take_log() == [
                "upsert default/r1",
                "upsert default/r2",
                "delete default/r3",
            ]
            assert informer.stats.lists == 1


async def test_changes_made_while_the_watch_was_silent_arrive_once_it_is_back(
    db: Path,
) -> None:
    async with serving(db) as server, client(server.url) as api:
        cluster = Cluster(api)
        await lab(cluster)
        sink = RecordingSink()
        tracker = sink.table.track()
        async with running(api, sink) as informer:
            await informer.synced.wait()
            tracker.next()
            sink.take_log()
            server.hang_watches(True)
            await cluster.delete("r2")
            await cluster.relink("r1", "r3")
            await cluster.create(topology("r4"))
            server.hang_watches(False)
            await wait_converged(sink, api)
            assert sorted(sink.take_log()) == [
                "delete default/r2",
                "upsert default/r1",
                "upsert default/r4",
            ]
            changes = {(c.key, c.deleted) for c in tracker.next()}
            assert changes == {
                ("default/r2", True),
                ("default/r1", False),
                ("default/r4", False),
            }


async def test_410_after_compaction_relists_and_emits_each_change_once(db: Path) -> None:
    async with serving(db) as server, client(server.url) as api:
        cluster = Cluster(api)
        await lab(cluster)
        await cluster.create(topology("r4"))
        sink = RecordingSink()
        tracker = sink.table.track()
        async with running(api, sink) as informer:
            await informer.synced.wait()
            tracker.next()
            sink.take_log()
            revision = sink.table.revision
            server.hang_watches(True)
            await cluster.delete("r2")
            await cluster.set_src_ip("r1", "10.0.0.1")
            await cluster.create(topology("r5", "r4"))
            server.compact()
            server.hang_watches(False)
            await wait_until(lambda: informer.stats.relists == 1, "a relist")
            await wait_converged(sink, api)
            assert sorted(sink.take_log()) == [
                "delete default/r2",
                "upsert default/r1",
                "upsert default/r5",
            ]
            assert sink.table.revision == revision + 3
            changes = {(c.key, c.deleted) for c in tracker.next()}
            assert changes == {
                ("default/r2", True),
                ("default/r1", False),
                ("default/r5", False),
            }
            assert informer.stats.events["ERROR"] >= 1


async def test_an_api_server_restart_with_changes_made_meanwhile(db: Path) -> None:
    async with serving(db) as first, client(first.url) as api:
        await lab(Cluster(api))
        sink = RecordingSink()
        async with running(api, sink) as informer:
            await informer.synced.wait()
            sink.take_log()
            await first.stop()
            async with serving(db) as other, client(other.url) as other_api:
                other_cluster = Cluster(other_api)
                await other_cluster.delete("r3")
                await other_cluster.set_src_ip("r1", "10.0.0.1")
                await other_cluster.create(topology("r4", "r1"))
            await wait_until(lambda: informer.stats.reconnects >= 1, "a failed reconnect")
            async with serving(db, first.port):
                await wait_converged(sink, api)
                assert sorted(sink.take_log()) == [
                    "delete default/r3",
                    "upsert default/r1",
                    "upsert default/r4",
                ]


async def test_a_half_open_watch_is_abandoned_after_the_client_timeout(
    db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with serving(db) as server, client(server.url) as api:
        cluster = Cluster(api)
        await lab(cluster)
        sink = RecordingSink()
        async with running(api, sink) as informer:
            await informer.synced.wait()
            await cluster.set_src_ip("r2", "10.0.0.2")
            await wait_until(lambda: len(sink.log) == 5, "r2's update")
            sink.take_log()
            # History before r2's update is gone: resuming from where the watch
            # began (the list) would be a 410 and a relist; from its last event is not.
            server.compact()
            with caplog.at_level(logging.WARNING, logger="meshwire.control.informer"):
                server.hang_watches(True)
                await cluster.set_src_ip("r1", "10.0.0.1")
                await wait_until(lambda: informer.stats.reconnects >= 1, "the client timeout")
            assert "TimeoutError" in caplog.text
            assert sink.take_log() == []
            server.hang_watches(False)
            await wait_converged(sink, api)
            assert sink.take_log() == ["upsert default/r1"]
            assert informer.stats.lists == 1


async def test_the_informer_syncs_and_streams_through_a_kubeconfig(
    db: Path, tmp_path: Path
) -> None:
    async with serving(db) as server:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url)
        api = await make_api_client("", str(kubeconfig))
        try:
            cluster = Cluster(api)
            await lab(cluster)
            sink = RecordingSink()
            async with running(api, sink) as informer:
                await informer.synced.wait()
                await cluster.delete("r3")
                await wait_until(lambda: len(sink.log) >= 5, "r3's deletion")
                await wait_converged(sink, api)
                assert sink.take_log() == [
                    "upsert default/r1",
                    "upsert default/r2",
                    "upsert default/r3",
                    "initialized",
                    "delete default/r3",
                ]
        finally:
            await api.close()  # type: ignore[no-untyped-call]


@pytest.mark.parametrize(
    ("content", "reason"),
    [(None, "no such file"), ("apiVersion: v1\nkind: Config\n", "current-context")],
    ids=["missing", "no-context"],
)
async def test_an_unusable_kubeconfig_is_an_error_naming_the_key_and_file(
    tmp_path: Path, content: str | None, reason: str
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    if content is not None:
        kubeconfig.write_text(content)
    with pytest.raises(ApiConfigError) as caught:
        await make_api_client("", str(kubeconfig))
    assert str(caught.value).startswith(f"api.kubeconfig: {str(kubeconfig)!r}: ")
    assert reason in str(caught.value)


async def _stream_under_current_loop(db: Path) -> list[str]:
    async with serving(db) as server, client(server.url) as api:
        cluster = Cluster(api)
        await lab(cluster)
        sink = RecordingSink()
        async with running(api, sink, FAST) as informer:
            await informer.synced.wait()
            await cluster.delete("r1")
            server.drop_watches()
            await cluster.set_src_ip("r2", "10.0.0.2")
            await wait_until(lambda: len(sink.log) >= 6, "the streamed changes")
            await wait_converged(sink, api)
            return sink.take_log()


def test_the_informer_runs_under_uvloop(db: Path) -> None:
    log = uvloop.run(_stream_under_current_loop(db))
    assert log == [
        "upsert default/r1",
        "upsert default/r2",
        "upsert default/r3",
        "initialized",
        "delete default/r1",
        "upsert default/r2",
    ]
