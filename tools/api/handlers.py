"""The REST resource `topologies.networkop.co.uk/v1beta1`: list, watch, get, create,
replace, patch, delete, and the `status` subresource.

Semantics follow kube-apiserver for a CRD with the status subresource:
- create is 201 with the stored object; 409 AlreadyExists for a taken name;
- replace (PUT) with a stale `metadata.resourceVersion` is 409 Conflict; without
  one it is unconditional; a missing object is 404 (never created by PUT);
- a write to the main resource ignores `status`, a write to `/status` changes
  only `status`;
- PATCH takes merge patch and JSON patch; a patch that sets
  `metadata.resourceVersion` is a precondition like PUT;
- delete answers 200 with the object as deleted; preconditions in a
  DeleteOptions body are honoured;
- every error is a `Status` object with the code and reason kube uses.
Label and field selectors are not supported and are refused with 400 rather
than silently ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from meshwire.control.model.topology import API_VERSION, GROUP, KIND, PLURAL, VERSION
from meshwire.tools.api import admission, errors, jsonio, paging, patch, watch
from meshwire.tools.api.store import Store

PREFIX = f"/apis/{GROUP}/{VERSION}"
_TRUE = ("true", "1")


def _object_response(obj: dict[str, Any], status: int = 200) -> web.Response:
    return jsonio.response(obj, status=status)


async def _json_body(request: web.Request) -> Any:
    # Bytes, not text: orjson refuses what is not UTF-8 as any other JSON error.
    data = await request.read()
    if not data:
        return None
    try:
        body = jsonio.loads(data)
    except ValueError as e:
        raise errors.BadRequest(f"the request body is not JSON: {e}") from e
    where = jsonio.too_deep(body)
    if where is not None:
        raise errors.BadRequest(
            f"the request body is nested deeper than {jsonio.MAX_DEPTH} levels at {where}"
        )
    return body


def _integer(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name, "")
    if raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise errors.BadRequest(f"{name}: Invalid value: {raw!r}: must be a non-negative integer")
    return value


class TopologyHandlers:
    def __init__(
        self,
        store: Store,
        broadcaster: watch.Broadcaster,
        *,
        bookmark_interval: float,
        hung: Callable[[], bool],
    ) -> None:
        self.store = store
        self.broadcaster = broadcaster
        self.bookmark_interval = bookmark_interval
        self.hung = hung

    def routes(self) -> list[web.RouteDef]:
        collection = f"{PREFIX}/namespaces/{{namespace}}/{PLURAL}"
        item = f"{collection}/{{name}}"
        return [
            web.get(f"{PREFIX}/{PLURAL}", self.list_or_watch),
            web.get(collection, self.list_or_watch),
            web.post(collection, self.create),
            web.delete(collection, self.delete_collection),
            web.get(item, self.get),
            web.put(item, self.replace),
            web.patch(item, self.patch),
            web.delete(item, self.delete),
            web.get(f"{item}/status", self.get),
            web.put(f"{item}/status", self.replace_status),
            web.patch(f"{item}/status", self.patch_status),
        ]

    # -- collection -----------------------------------------------------------

    async def list_or_watch(self, request: web.Request) -> web.StreamResponse:
        namespace = request.match_info.get("namespace")
        for selector in ("labelSelector", "fieldSelector"):
            if request.query.get(selector):
                raise errors.BadRequest(f"{selector}: not supported by the embedded API")
        if request.query.get("watch", "").lower() in _TRUE:
            return await self._watch(request, namespace)
        limit = _integer(request, "limit") or 0
        token = request.query.get("continue", "")
        if token:
            rv, after = paging.decode(token)
            page = self.store.list_page(namespace, limit=limit, at_rv=rv, after=after)
        else:
            page = self.store.list_page(namespace, limit=limit)
        metadata: dict[str, Any] = {"resourceVersion": str(page.rv)}
        if page.last is not None:
            metadata["continue"] = paging.encode(page.rv, page.last)
        for obj in page.items:
            obj.setdefault("apiVersion", API_VERSION)
            obj.setdefault("kind", KIND)
        body: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": f"{KIND}List",
            "metadata": metadata,
        }
        body["items"] = page.items
        return jsonio.response(body)

    async def _watch(self, request: web.Request, namespace: str | None) -> web.StreamResponse:
        rv = request.query.get("resourceVersion", "")
        if rv not in ("", "0") and (not rv.isdigit() or int(rv) <= 0):
            raise errors.BadRequest(f"resourceVersion: Invalid value: {rv!r}")
        timeout = _integer(request, "timeoutSeconds")
        spec = watch.WatchRequest(
            namespace=namespace,
            resource_version=rv,
            bookmarks=request.query.get("allowWatchBookmarks", "").lower() in _TRUE,
            timeout=float(timeout) if timeout else None,
        )
        return await watch.respond(
            request,
            self.store,
            self.broadcaster,
            spec,
            bookmark_interval=self.bookmark_interval,
            hung=self.hung,
        )

    async def create(self, request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        obj = admission.admit(await _json_body(request), namespace)
        return _object_response(self.store.create(obj), 201)

    async def delete_collection(self, request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        deleted = [
            self.store.delete(namespace, obj["metadata"]["name"])
            for obj in self.store.list_page(namespace).items
        ]
        metadata = {"resourceVersion": str(self.store.resource_version)}
        body: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": f"{KIND}List",
            "metadata": metadata,
        }
        body["items"] = deleted
        return jsonio.response(body)

    # -- one object -----------------------------------------------------------

    def _current(self, request: web.Request) -> dict[str, Any]:
        name = request.match_info["name"]
        obj = self.store.get(request.match_info["namespace"], name)
        if obj is None:
            raise errors.not_found(name)
        return obj

    async def get(self, request: web.Request) -> web.Response:
        return _object_response(self._current(request))

    async def replace(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        obj = admission.admit(await _json_body(request), namespace, name)
        return _object_response(self.store.update(obj))

    async def replace_status(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        current = self._current(request)
        if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
            raise errors.BadRequest("the request body must be a Topology object")
        precondition = body.get("metadata", {}).get("resourceVersion") or ""
        candidate = {
            **current,
            "metadata": {**current["metadata"], "resourceVersion": precondition},
            "status": body.get("status") or {},
        }
        return self._write_status(request, candidate)

    async def patch(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        patched = patch.apply(
            request.content_type, self._current(request), await _json_body(request)
        )
        obj = admission.admit(patched, namespace, name)
        return _object_response(self.store.update(obj))

    async def patch_status(self, request: web.Request) -> web.Response:
        patched = patch.apply(
            request.content_type, self._current(request), await _json_body(request)
        )
        return self._write_status(request, patched)

    def _write_status(self, request: web.Request, candidate: dict[str, Any]) -> web.Response:
        obj = admission.admit(
            candidate, request.match_info["namespace"], request.match_info["name"]
        )
        return _object_response(self.store.update(obj, status=True))

    async def delete(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        options = await _json_body(request) or {}
        preconditions = options.get("preconditions") if isinstance(options, dict) else None
        if not isinstance(preconditions, dict):
            preconditions = {}
        deleted = self.store.delete(
            namespace,
            name,
            resource_version=str(preconditions.get("resourceVersion") or ""),
            uid=str(preconditions.get("uid") or ""),
        )
        return _object_response(deleted)
