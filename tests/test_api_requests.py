"""The embedded API counts the requests it answers by client, verb and resource, as
kube-apiserver's audit log names them, so a benchmark can tell a daemon's LISTs
and GETs from its watches and status writes."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from meshwire.control.model.topology import PLURAL
from meshwire.tools.api.requests import verb_of
from meshwire.tools.api.server import ApiServer
from tests.api_helpers import TOPOLOGIES, call, create, get, sync_api, topology

BASE = "/apis/networkop.co.uk/v1beta1"
ITEM = f"{BASE}/namespaces/default/topologies/r1"


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", f"{BASE}/topologies", {}, ("list", "topologies")),
        ("GET", f"{BASE}/namespaces/default/topologies", {"limit": "500"}, ("list", "topologies")),
        ("GET", f"{BASE}/topologies", {"watch": "true"}, ("watch", "topologies")),
        ("GET", f"{BASE}/topologies", {"watch": "1"}, ("watch", "topologies")),
        ("GET", f"{BASE}/topologies", {"watch": "false"}, ("list", "topologies")),
        ("POST", f"{BASE}/namespaces/default/topologies", {}, ("create", "topologies")),
        ("DELETE", f"{BASE}/namespaces/default/topologies", {}, ("deletecollection", "topologies")),
        ("GET", ITEM, {}, ("get", "topologies")),
        ("PUT", ITEM, {}, ("update", "topologies")),
        ("PATCH", ITEM, {}, ("patch", "topologies")),
        ("DELETE", ITEM, {}, ("delete", "topologies")),
        ("GET", f"{ITEM}/status", {}, ("get", "topologies/status")),
        ("PATCH", f"{ITEM}/status", {}, ("patch", "topologies/status")),
        ("PUT", "/apis/meshwire.dev/v1alpha1/idallocations/n1", {}, ("update", "idallocations")),
        ("GET", "/api/v1/namespaces/default/pods/p", {}, ("get", "pods")),
        ("GET", "/apis", {}, ("get", "/apis")),
        ("GET", BASE, {}, ("get", BASE)),
        ("GET", "/healthz", {}, ("get", "/healthz")),
    ],
)
def test_each_request_is_named_by_its_kubernetes_verb_and_resource(
    method: str, path: str, query: dict[str, str], expected: tuple[str, str]
) -> None:
    assert verb_of(method, path, query) == expected


async def requests(server: ApiServer) -> list[dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{server.url}/debug/requests") as answer,
    ):
        assert answer.status == 200
        body: dict[str, Any] = await answer.json()
        return body["requests"]


async def test_the_server_counts_a_clients_requests_by_verb_and_answers_them(
    server: ApiServer,
) -> None:
    api = sync_api(server.url)
    await call(create, api, topology("r1"))
    await call(get, api, "r1")
    await call(get, api, "r1")
    await call(api.list_namespaced_custom_object, *TOPOLOGIES, "default", PLURAL)
    counted = {(r["verb"], r["resource"]): r["count"] for r in await requests(server)}
    assert counted == {("create", "topologies"): 1, ("get", "topologies"): 2,
                       ("list", "topologies"): 1}  # fmt: skip
    # One client, so one source address, whichever the loopback gave it.
    assert len({r["source"] for r in await requests(server)}) == 1
