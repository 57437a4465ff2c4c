"""Watches as the official clients' `Watch().stream(...)` sees them: events for
each change, where a watch starts, bookmarks, timeouts and 410 Gone."""

from __future__ import annotations

import threading
from typing import Any

from kubernetes import watch
from kubernetes.aio import watch as aio_watch
from kubernetes.client.exceptions import ApiException

from meshwire.control.model.topology import PLURAL
from meshwire.tools.api.server import ApiServer
from tests.api_helpers import (
    TOPOLOGIES,
    aio_api,
    call,
    create,
    sync_api,
    topology,
    wait_until,
)


class Recorder:
    """The sync client's watch, on a thread, recording (type, name, rv) until stopped."""

    def __init__(self, url: str, namespace: str = "default", **kwargs: Any) -> None:
        self.api = sync_api(url)
        self.watch = watch.Watch()
        self.events: list[tuple[str, str, str]] = []
        self.error: BaseException | None = None
        self.done = threading.Event()
        args = (*TOPOLOGIES, namespace, PLURAL)
        self._thread = threading.Thread(target=self._run, args=(args, kwargs), daemon=True)
        self._thread.start()

    def _run(self, args: tuple[str, ...], kwargs: dict[str, Any]) -> None:
        try:
            for event in self.watch.stream(self.api.list_namespaced_custom_object, *args, **kwargs):
                meta = event["raw_object"]["metadata"]
                self.events.append((event["type"], meta.get("name", ""), meta["resourceVersion"]))
        except BaseException as e:
            self.error = e
        finally:
            self.done.set()

    def types(self) -> list[tuple[str, str]]:
        return [(t, name) for t, name, _ in self.events if t != "BOOKMARK"]

    async def stop(self) -> None:
        self.watch.stop()
        await call(self._thread.join, 10)


async def test_sync_watch_sees_create_update_and_delete(server: ApiServer) -> None:
    api = sync_api(server.url)
    recorder = Recorder(server.url, timeout_seconds=30)
    await wait_until(lambda: server.open_watches == 1, "the watch to open")

    await call(create, api, topology("r1", "r2"))
    await call(
        api.patch_namespaced_custom_object,
        *TOPOLOGIES,
        "default",
        PLURAL,
        "r1",
        {"spec": topology("r1", "r3")["spec"]},
    )
    await call(api.delete_namespaced_custom_object, *TOPOLOGIES, "default", PLURAL, "r1")
    await wait_until(lambda: len(recorder.types()) == 3, "three events")
    await recorder.stop()

    assert recorder.types() == [("ADDED", "r1"), ("MODIFIED", "r1"), ("DELETED", "r1")]
    assert [rv for _, _, rv in recorder.events] == ["1", "2", "3"]


async def test_aio_watch_starts_with_current_objects_then_follows(server: ApiServer) -> None:
    api = sync_api(server.url)
    await call(create, api, topology("r1"))
    await call(create, api, topology("r2"))
    seen: list[tuple[str, str]] = []
    async with aio_api(server.url) as aio:
        stream = aio_watch.Watch().stream(
            aio.list_namespaced_custom_object, *TOPOLOGIES, "default", PLURAL, timeout_seconds=30
        )
        async with stream:
            async for event in stream:
                seen.append((event["type"], event["raw_object"]["metadata"]["name"]))
                if len(seen) == 2:
                    await call(create, api, topology("r3"))
                if len(seen) == 3:
                    break
    assert seen == [("ADDED", "r1"), ("ADDED", "r2"), ("ADDED", "r3")]


async def test_watch_from_a_resource_version_sends_only_later_changes(server: ApiServer) -> None:
    api = sync_api(server.url)
    await call(create, api, topology("r1"))
    r2 = await call(create, api, topology("r2"))
    await call(create, api, topology("r3"))
    await call(create, api, topology("other", namespace="elsewhere"))

    recorder = Recorder(
        server.url, resource_version=r2["metadata"]["resourceVersion"], timeout_seconds=1
    )
    await call(recorder.done.wait, 15)

    assert recorder.error is None
    assert recorder.types() == [("ADDED", "r3")]


async def test_all_namespaces_watch(server: ApiServer) -> None:
    api = sync_api(server.url)
    await call(create, api, topology("a", namespace="one"))
    await call(create, api, topology("b", namespace="two"))
    events = await call(
        lambda: [
            (e["type"], e["raw_object"]["metadata"]["namespace"])
            for e in watch.Watch().stream(
                api.list_cluster_custom_object, *TOPOLOGIES, PLURAL, timeout_seconds=1
            )
        ]
    )
    assert events == [("ADDED", "one"), ("ADDED", "two")]


async def test_bookmarks_carry_the_current_resource_version(server: ApiServer) -> None:
    api = sync_api(server.url)
    await call(create, api, topology("r1"))
    latest = await call(create, api, topology("r2", namespace="elsewhere"))
    recorder = Recorder(
        server.url,
        resource_version=latest["metadata"]["resourceVersion"],
        allow_watch_bookmarks=True,
        timeout_seconds=30,
    )
    await wait_until(lambda: recorder.events, "a bookmark")
    await recorder.stop()

    kind, _, rv = recorder.events[0]
    assert (kind, rv) == ("BOOKMARK", latest["metadata"]["resourceVersion"])


async def test_watch_from_a_compacted_resource_version_is_410_gone(server: ApiServer) -> None:
    api = sync_api(server.url)
    first = await call(create, api, topology("r1"))
    await call(create, api, topology("r2"))
    server.compact()

    recorder = Recorder(
        server.url, resource_version=first["metadata"]["resourceVersion"], timeout_seconds=5
    )
    await call(recorder.done.wait, 15)

    assert isinstance(recorder.error, ApiException)
    assert recorder.error.status == 410
    assert "Expired" in str(recorder.error.reason)
    assert recorder.events == []
