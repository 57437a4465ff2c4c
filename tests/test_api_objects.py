"""The embedded API as the official `kubernetes` clients see it: create, read,
replace, patch, delete, the status subresource, and kube's error answers."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from kubernetes.client.exceptions import ApiException

from meshwire.control.model.topology import PLURAL
from meshwire.tools.api.server import ApiServer
from tests.api_helpers import (
    TOPOLOGIES,
    aio_api,
    call,
    create,
    get,
    sync_api,
    topology,
)


def status_of(error: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(error.body or "{}")
    return body


async def test_create_then_read_back_with_both_clients(server: ApiServer) -> None:
    api = sync_api(server.url)
    sent = topology("r1", "r2", "r3")
    sent["spec"]["links"][0]["local_ip"] = "12.12.12.1/24"

    created = await call(create, api, sent)

    assert created["spec"] == sent["spec"]
    assert created["metadata"]["generation"] == 1
    async with aio_api(server.url) as aio:
        read = await aio.get_namespaced_custom_object(*TOPOLOGIES, "default", PLURAL, "r1")
    assert read == created


async def test_replace_with_a_stale_resource_version_is_409_conflict(server: ApiServer) -> None:
    api = sync_api(server.url)
    created = await call(create, api, topology("r1", "r2"))
    newer = await call(
        api.replace_namespaced_custom_object,
        *TOPOLOGIES,
        "default",
        PLURAL,
        "r1",
        {**topology("r1", "r3"), "metadata": created["metadata"]},
    )
    assert newer["metadata"]["generation"] == 2

    stale = {**topology("r1", "r4"), "metadata": created["metadata"]}
    with pytest.raises(ApiException) as caught:
        await call(
            api.replace_namespaced_custom_object, *TOPOLOGIES, "default", PLURAL, "r1", stale
        )

    assert caught.value.status == 409
    assert status_of(caught.value)["reason"] == "Conflict"
    assert (await call(get, api, "r1"))["spec"] == topology("r1", "r3")["spec"]


async def test_create_of_an_existing_name_is_409_already_exists(server: ApiServer) -> None:
    api = sync_api(server.url)
    await call(create, api, topology("r1"))
    with pytest.raises(ApiException) as caught:
        await call(create, api, topology("r1", "r2"))
    assert caught.value.status == 409
    assert status_of(caught.value)["reason"] == "AlreadyExists"


async def test_missing_objects_are_404_not_found(server: ApiServer) -> None:
    api = sync_api(server.url)
    for method, extra in (
        (api.get_namespaced_custom_object, ()),
        (api.delete_namespaced_custom_object, ()),
        (api.patch_namespaced_custom_object, ({"spec": {}},)),
        (api.replace_namespaced_custom_object, (topology("nope"),)),
    ):
        with pytest.raises(ApiException) as caught:
            await call(method, *TOPOLOGIES, "default", PLURAL, "nope", *extra)
        status = status_of(caught.value)
        assert (caught.value.status, status["kind"], status["reason"]) == (
            404,
            "Status",
            "NotFound",
        )


async def test_invalid_objects_are_422_naming_the_field(server: ApiServer) -> None:
    api = sync_api(server.url)
    bad_uid = topology("r1", "r2")
    bad_uid["spec"]["links"][0]["uid"] = "one"
    bad_intf = topology("r2", "r1")
    bad_intf["spec"]["links"][0]["local_intf"] = "an-interface-name-too-long"

    for obj, field in ((bad_uid, "spec.links[0].uid"), (bad_intf, "spec.links[0].local_intf")):
        with pytest.raises(ApiException) as caught:
            await call(create, api, obj)
        status = status_of(caught.value)
        assert (caught.value.status, status["reason"]) == (422, "Invalid")
        assert status["details"]["causes"][0]["field"] == field
        assert "spec.links[0]" in status["message"]
    with pytest.raises(ApiException) as caught:
        await call(get, api, "r1")
    assert caught.value.status == 404


async def test_status_subresource_changes_only_status(server: ApiServer) -> None:
    api = sync_api(server.url)
    await call(create, api, topology("r1", "r2"))

    patched = await call(
        api.patch_namespaced_custom_object_status,
        *TOPOLOGIES,
        "default",
        PLURAL,
        "r1",
        {"status": {"src_ip": "10.0.0.1"}, "spec": {"links": []}},
    )
    assert patched["status"] == {"src_ip": "10.0.0.1"}
    assert patched["spec"] == topology("r1", "r2")["spec"]
    assert patched["metadata"]["generation"] == 1

    replaced = await call(
        api.replace_namespaced_custom_object,
        *TOPOLOGIES,
        "default",
        PLURAL,
        "r1",
        {**topology("r1", "r3"), "status": {"src_ip": "forged"}},
    )
    assert replaced["status"] == {"src_ip": "10.0.0.1"}

    async with aio_api(server.url) as aio:
        body = {**replaced, "status": {"src_ip": "10.0.0.2", "net_ns": "/run/netns/x"}}
        written = await aio.replace_namespaced_custom_object_status(
            *TOPOLOGIES, "default", PLURAL, "r1", body
        )
        read = await aio.get_namespaced_custom_object_status(*TOPOLOGIES, "default", PLURAL, "r1")
    assert read == written
    assert read["status"] == {"src_ip": "10.0.0.2", "net_ns": "/run/netns/x"}
    assert read["spec"] == topology("r1", "r3")["spec"]


async def test_merge_patch_and_json_patch(server: ApiServer) -> None:
    api = sync_api(server.url)
    await call(create, api, topology("r1", "r2"))
    labelled = await call(
        api.patch_namespaced_custom_object,
        *TOPOLOGIES,
        "default",
        PLURAL,
        "r1",
        {"metadata": {"labels": {"lab": "one"}}},
    )
    assert labelled["metadata"]["labels"] == {"lab": "one"}
    assert labelled["metadata"]["generation"] == 1

    operations = [{"op": "replace", "path": "/spec/links/0/peer_pod", "value": "r9"}]
    async with aiohttp.ClientSession() as session:
        url = f"{server.url}/apis/networkop.co.uk/v1beta1/namespaces/default/{PLURAL}/r1"
        headers = {"Content-Type": "application/json-patch+json"}
        async with session.patch(url, data=json.dumps(operations), headers=headers) as answer:
            assert answer.status == 200
            patched = await answer.json()
    assert patched["spec"]["links"][0]["peer_pod"] == "r9"
    assert patched["metadata"]["generation"] == 2


async def test_delete_returns_the_object_and_honours_preconditions(server: ApiServer) -> None:
    api = sync_api(server.url)
    created = await call(create, api, topology("r1"))
    with pytest.raises(ApiException) as caught:
        await call(
            api.delete_namespaced_custom_object,
            *TOPOLOGIES,
            "default",
            PLURAL,
            "r1",
            body={"preconditions": {"uid": "someone-else"}},
        )
    assert caught.value.status == 409

    deleted = await call(api.delete_namespaced_custom_object, *TOPOLOGIES, "default", PLURAL, "r1")
    assert deleted["metadata"]["uid"] == created["metadata"]["uid"]
    with pytest.raises(ApiException):
        await call(get, api, "r1")


async def test_discovery_documents_and_health(server: ApiServer) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{server.url}/apis/networkop.co.uk/v1beta1") as answer:
            resources = (await answer.json())["resources"]
        async with session.get(f"{server.url}/healthz") as answer:
            assert await answer.text() == "ok"
        async with session.get(f"{server.url}/apis/nothing/here") as answer:
            assert answer.status == 404
            assert (await answer.json())["kind"] == "Status"
    assert {r["name"] for r in resources} == {PLURAL, f"{PLURAL}/status"}
