"""Lists as the official clients page through them, and what a restart keeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes.aio import watch as aio_watch
from kubernetes.client.exceptions import ApiException

from meshwire.control.model.topology import PLURAL
from meshwire.tools.api.server import ApiServer
from tests.api_helpers import (
    TOPOLOGIES,
    aio_api,
    call,
    create,
    private_loopback,
    serving,
    sync_api,
    topology,
)


def names(page: dict[str, Any]) -> list[str]:
    return [item["metadata"]["name"] for item in page["items"]]


async def test_list_answers_a_topology_list_at_the_current_resource_version(
    server: ApiServer,
) -> None:
    api = sync_api(server.url)
    await call(create, api, topology("r2"))
    last = await call(create, api, topology("r1", namespace="other"))
    async with aio_api(server.url) as aio:
        everything = await aio.list_cluster_custom_object(*TOPOLOGIES, PLURAL)
        default = await aio.list_namespaced_custom_object(*TOPOLOGIES, "default", PLURAL)

    assert everything["kind"] == "TopologyList"
    assert everything["metadata"]["resourceVersion"] == last["metadata"]["resourceVersion"]
    assert [i["metadata"]["namespace"] for i in everything["items"]] == ["default", "other"]
    assert names(default) == ["r2"]
    assert all(i["kind"] == "Topology" for i in everything["items"])


async def test_pages_follow_continue_tokens_as_one_snapshot(server: ApiServer) -> None:
    api = sync_api(server.url)
    for name in ("a", "b", "c", "d", "e"):
        await call(create, api, topology(name))
    listing = (*TOPOLOGIES, "default", PLURAL)

    first = await call(api.list_namespaced_custom_object, *listing, limit=2)
    await call(api.delete_namespaced_custom_object, *listing, "c")
    await call(create, api, topology("bb"))
    second = await call(
        api.list_namespaced_custom_object,
        *listing,
        limit=2,
        _continue=first["metadata"]["continue"],
    )
    third = await call(
        api.list_namespaced_custom_object,
        *listing,
        limit=2,
        _continue=second["metadata"]["continue"],
    )

    assert (names(first), names(second), names(third)) == (["a", "b"], ["c", "d"], ["e"])
    assert "continue" not in third["metadata"]
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    fresh = await call(api.list_namespaced_custom_object, *listing)
    assert names(fresh) == ["a", "b", "bb", "d", "e"]


async def test_a_continue_token_compacted_away_is_410(server: ApiServer) -> None:
    api = sync_api(server.url)
    for name in ("a", "b", "c"):
        await call(create, api, topology(name))
    first = await call(api.list_cluster_custom_object, *TOPOLOGIES, PLURAL, limit=1)
    await call(create, api, topology("d"))
    server.compact()

    with pytest.raises(ApiException) as caught:
        await call(
            api.list_cluster_custom_object,
            *TOPOLOGIES,
            PLURAL,
            limit=1,
            _continue=first["metadata"]["continue"],
        )
    assert caught.value.status == 410


async def test_a_restart_keeps_objects_history_and_resource_versions(tmp_path: Path) -> None:
    db = str(tmp_path / "topologies.db")
    with private_loopback():
        async with serving(db) as before:
            api = sync_api(before.url)
            first = await call(create, api, topology("r1", "r2"))
            await call(create, api, topology("r2", "r1"))
            stored = await call(api.list_cluster_custom_object, *TOPOLOGIES, PLURAL)
        async with serving(db) as after:
            api = sync_api(after.url)
            kept = await call(api.list_cluster_custom_object, *TOPOLOGIES, PLURAL)
            third = await call(create, api, topology("r3"))
            async with aio_api(after.url) as aio:
                stream = aio_watch.Watch().stream(
                    aio.list_cluster_custom_object,
                    *TOPOLOGIES,
                    PLURAL,
                    resource_version=first["metadata"]["resourceVersion"],
                    timeout_seconds=1,
                )
                async with stream:
                    events = [
                        (e["type"], e["raw_object"]["metadata"]["name"]) async for e in stream
                    ]

    assert kept == stored
    assert int(third["metadata"]["resourceVersion"]) > int(kept["metadata"]["resourceVersion"])
    assert events == [("ADDED", "r2"), ("ADDED", "r3")]
