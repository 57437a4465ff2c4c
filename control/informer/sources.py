"""The resources a `Reflector` follows, as `Source`s over the `kubernetes.aio` client, and
the one write to a Node: the daemon's annotation on its own (daemon/node_watch.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import ClientResponse
from kubernetes.aio.client import ApiClient, CustomObjectsApi
from kubernetes.aio.client.exceptions import ApiException

from meshwire.control.common.media import MERGE_PATCH


@dataclass(frozen=True, slots=True)
class CustomObjects:
    """Every object of a custom resource; in `namespace` only when it is not ""."""

    api: ApiClient
    group: str
    version: str
    plural: str
    namespace: str = ""

    @property
    def name(self) -> str:
        return self.plural

    async def list_page(self, token: str | None, limit: int, client_timeout: float) -> Any:
        objects = CustomObjectsApi(self.api)
        common: dict[str, Any] = {
            "limit": limit,
            "_continue": token,
            "_request_timeout": client_timeout,
        }
        if self.namespace:
            return await objects.list_namespaced_custom_object(
                self.group, self.version, self.namespace, self.plural, **common
            )
        return await objects.list_cluster_custom_object(
            self.group, self.version, self.plural, **common
        )

    async def open_watch(
        self, resource_version: str, timeout_seconds: int, client_timeout: float
    ) -> ClientResponse:
        objects = CustomObjectsApi(self.api)
        common: dict[str, Any] = {
            "watch": True,
            "allow_watch_bookmarks": True,
            "resource_version": resource_version or None,
            "timeout_seconds": timeout_seconds,
            "_request_timeout": client_timeout,
        }
        if self.namespace:
            return await objects.list_namespaced_custom_object_without_preload_content(
                self.group, self.version, self.namespace, self.plural, **common
            )
        return await objects.list_cluster_custom_object_without_preload_content(
            self.group, self.version, self.plural, **common
        )


@dataclass(frozen=True, slots=True)
class Namespace:
    """One namespace, by name (a list of none or one)."""

    api: ApiClient
    namespace: str

    @property
    def name(self) -> str:
        return f"namespace {self.namespace}"

    async def list_page(self, token: str | None, limit: int, client_timeout: float) -> Any:
        return await _json_of(
            await _core(self.api).list_namespace_without_preload_content(
                field_selector=f"metadata.name={self.namespace}",
                **_page_args(token, limit, client_timeout),
            )
        )

    async def open_watch(
        self, resource_version: str, timeout_seconds: int, client_timeout: float
    ) -> ClientResponse:
        response: ClientResponse = await _core(self.api).list_namespace_without_preload_content(
            field_selector=f"metadata.name={self.namespace}",
            **_watch_args(resource_version, timeout_seconds, client_timeout),
        )
        return response


@dataclass(frozen=True, slots=True)
class Nodes:
    """Every Node object of the cluster."""

    api: ApiClient

    @property
    def name(self) -> str:
        return "nodes"

    async def list_page(self, token: str | None, limit: int, client_timeout: float) -> Any:
        return await _json_of(
            await _core(self.api).list_node_without_preload_content(
                **_page_args(token, limit, client_timeout)
            )
        )

    async def open_watch(
        self, resource_version: str, timeout_seconds: int, client_timeout: float
    ) -> ClientResponse:
        response: ClientResponse = await _core(self.api).list_node_without_preload_content(
            **_watch_args(resource_version, timeout_seconds, client_timeout)
        )
        return response


async def annotate_node(
    api: ApiClient, node: str, annotations: dict[str, str], client_timeout: float
) -> None:
    """Merge-patches `annotations` onto the Node named `node` through its status
    subresource (which takes metadata, never the spec); raises `ApiException`."""
    await _core(api).patch_node_status(
        node,
        {"metadata": {"annotations": annotations}},
        _content_type=MERGE_PATCH,
        _request_timeout=client_timeout,
    )


def _core(api: ApiClient) -> Any:
    # Imported here, not with the module: the client's core API module takes
    # 0.3-0.45 s to import, which every daemon paid at start, though only
    # deploy/ follows its namespace and the nodes.
    from kubernetes.aio.client import CoreV1Api

    return CoreV1Api(api)


def _page_args(token: str | None, limit: int, client_timeout: float) -> dict[str, Any]:
    return {"limit": limit, "_continue": token, "_request_timeout": client_timeout}


def _watch_args(
    resource_version: str, timeout_seconds: int, client_timeout: float
) -> dict[str, Any]:
    return {
        "watch": True,
        "allow_watch_bookmarks": True,
        "resource_version": resource_version or None,
        "timeout_seconds": timeout_seconds,
        "_request_timeout": client_timeout,
    }


async def _json_of(response: ClientResponse) -> Any:
    """A list's answer as JSON; ApiException for any status but 200."""
    try:
        if response.status != 200:
            body = await response.text()
            raise ApiException(status=response.status, reason=response.reason, body=body)
        return await response.json()
    finally:
        response.close()
