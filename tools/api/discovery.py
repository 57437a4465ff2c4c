"""The fixed documents a Kubernetes client or tool reads before it talks to a resource:
`/version`, `/healthz`, `/api`, `/apis`, the group and the group version."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from meshwire.control.common import slots
from meshwire.control.model.topology import API_VERSION, GROUP, KIND, PLURAL, VERSION
from meshwire.tools.api import jsonio

_GROUP_VERSION = {"groupVersion": API_VERSION, "version": VERSION}
_GROUP = {"name": GROUP, "versions": [_GROUP_VERSION], "preferredVersion": _GROUP_VERSION}
_ID_GROUP_VERSION = {"groupVersion": slots.API_VERSION, "version": slots.VERSION}
_ID_GROUP = {
    "name": slots.GROUP,
    "versions": [_ID_GROUP_VERSION],
    "preferredVersion": _ID_GROUP_VERSION,
}

DOCUMENTS: dict[str, dict[str, Any]] = {
    "/version": {
        "major": "1",
        "minor": "30",
        "gitVersion": "v1.30.0+meshwire",
        "platform": "linux/embedded",
    },
    "/api": {"kind": "APIVersions", "apiVersion": "v1", "versions": ["v1"]},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_GROUP, _ID_GROUP]},
    f"/apis/{GROUP}": {"kind": "APIGroup", "apiVersion": "v1", **_GROUP},
    f"/apis/{slots.GROUP}": {"kind": "APIGroup", "apiVersion": "v1", **_ID_GROUP},
    f"/apis/{slots.API_VERSION}": {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": slots.API_VERSION,
        "resources": [
            {
                "name": slots.PLURAL,
                "singularName": slots.KIND.lower(),
                "namespaced": False,
                "kind": slots.KIND,
                "verbs": ["create", "delete", "get", "list", "update", "watch"],
            }
        ],
    },
    f"/apis/{API_VERSION}": {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": API_VERSION,
        "resources": [
            {
                "name": PLURAL,
                "singularName": KIND.lower(),
                "namespaced": True,
                "kind": KIND,
                "verbs": [
                    "create",
                    "delete",
                    "deletecollection",
                    "get",
                    "list",
                    "patch",
                    "update",
                    "watch",
                ],
            },
            {
                "name": f"{PLURAL}/status",
                "singularName": "",
                "namespaced": True,
                "kind": KIND,
                "verbs": ["get", "patch", "update"],
            },
        ],
    },
}


def routes() -> list[web.RouteDef]:
    out = [web.get(path, _document(body)) for path, body in DOCUMENTS.items()]
    out.append(web.get("/healthz", _healthz))
    return out


def _document(body: dict[str, Any]) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(_: web.Request) -> web.Response:
        return jsonio.response(body)

    return handler


async def _healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok")
