"""The REST resource `idallocations.meshwire.dev/v1alpha1`, cluster-scoped: list, watch,
get, create, replace, delete.

It holds the daemons' id slots (`control/common/slots.py`); on a real cluster
`deploy/crd-idallocations.yaml` defines the same resource. Semantics are those
of `handlers.py` for a CRD without a status subresource: create is 201 (409
AlreadyExists for a taken name), replace with a stale
`metadata.resourceVersion` is 409 Conflict, a missing object is 404. What the
CRD's schema checks is checked here too (the shape of `spec.namespaces`);
like the CRD, the server does not check that slots are distinct: that is
the writers' invariant.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from meshwire.control.common.slots import API_VERSION, GROUP, KIND, PLURAL, VERSION
from meshwire.control.model.name_rules import dns_label_problem, dns_subdomain_problem
from meshwire.tools.api import errors, jsonio, watch
from meshwire.tools.api.store import Store

RESOURCE = errors.Resource(PLURAL, GROUP)
# The store's tables in the API's file: beside the Topology objects, apart from them.
TABLE_PREFIX = "idallocations_"
COLLECTION = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
_TRUE = ("true", "1")


class IdAllocationHandlers:
    def __init__(
        self, store: Store, broadcaster: watch.Broadcaster, *, bookmark_interval: float
    ) -> None:
        self.store = store
        self.broadcaster = broadcaster
        self.bookmark_interval = bookmark_interval

    def routes(self) -> list[web.RouteDef]:
        item = f"{COLLECTION}/{{name}}"
        return [
            web.get(COLLECTION, self.list_or_watch),
            web.post(COLLECTION, self.create),
            web.get(item, self.get),
            web.put(item, self.replace),
            web.delete(item, self.delete),
        ]

    async def list_or_watch(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch", "").lower() in _TRUE:
            return await self._watch(request)
        page = self.store.list_page()
        items = [{"apiVersion": API_VERSION, "kind": KIND, **obj} for obj in page.items]
        return jsonio.response(
            {
                "apiVersion": API_VERSION,
                "kind": f"{KIND}List",
                "metadata": {"resourceVersion": str(page.rv)},
                "items": items,
            }
        )

    async def _watch(self, request: web.Request) -> web.StreamResponse:
        rv = request.query.get("resourceVersion", "")
        if rv not in ("", "0") and (not rv.isdigit() or int(rv) <= 0):
            raise errors.BadRequest(f"resourceVersion: Invalid value: {rv!r}")
        timeout = request.query.get("timeoutSeconds", "")
        spec = watch.WatchRequest(
            namespace=None,
            resource_version=rv,
            bookmarks=request.query.get("allowWatchBookmarks", "").lower() in _TRUE,
            timeout=float(timeout) if timeout.isdigit() and int(timeout) > 0 else None,
        )
        return await watch.respond(
            request,
            self.store,
            self.broadcaster,
            spec,
            bookmark_interval=self.bookmark_interval,
            hung=lambda: False,
        )

    async def create(self, request: web.Request) -> web.Response:
        obj = admit(await _json_body(request))
        return jsonio.response(self.store.create(obj), status=201)

    async def get(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        obj = self.store.get("", name)
        if obj is None:
            raise errors.not_found(name, RESOURCE)
        return jsonio.response(obj)

    async def replace(self, request: web.Request) -> web.Response:
        obj = admit(await _json_body(request), request.match_info["name"])
        return jsonio.response(self.store.update(obj))

    async def delete(self, request: web.Request) -> web.Response:
        return jsonio.response(self.store.delete("", request.match_info["name"]))


def admit(body: Any, name: str | None = None) -> dict[str, Any]:
    """The object to store; `name` is the URL's (None for a create). Raises 400 or 422."""
    if not isinstance(body, dict):
        raise errors.BadRequest("the request body must be a JSON object")
    if body.get("apiVersion") != API_VERSION or body.get("kind") != KIND:
        raise errors.BadRequest(
            f"the object is {body.get('apiVersion')!r}/{body.get('kind')!r}, "
            f"expected {API_VERSION!r}/{KIND!r}"
        )
    meta = body.get("metadata")
    if not isinstance(meta, dict):
        raise errors.BadRequest("metadata: expected a JSON object")
    if meta.get("namespace"):
        raise errors.BadRequest(f"{PLURAL} are cluster-scoped: metadata.namespace must be empty")
    object_name = meta.get("name")
    if name is not None and object_name != name:
        raise errors.BadRequest(
            f"the name of the object ({object_name!r}) does not match the name on the URL "
            f"({name!r})"
        )
    problem = (
        dns_subdomain_problem(object_name) if isinstance(object_name, str) else "must be a string"
    )
    if problem is not None:
        raise _invalid(str(object_name), "metadata.name", problem)
    assert isinstance(object_name, str)
    spec = body.get("spec") or {}
    entries = spec.get("namespaces", {}) if isinstance(spec, dict) else None
    if not isinstance(entries, dict):
        raise _invalid(object_name, "spec.namespaces", "expected an object")
    for namespace, entry in entries.items():
        field = f"spec.namespaces.{namespace}"
        problem = dns_label_problem(namespace)
        if problem is not None:
            raise _invalid(object_name, field, problem)
        if not isinstance(entry, dict) or set(entry) != {"vniSlot", "wireSlot"}:
            raise _invalid(object_name, field, "expected exactly vniSlot and wireSlot")
        for key, value in entry.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise _invalid(object_name, f"{field}.{key}", "must be an integer >= 0")
    return {k: v for k, v in body.items() if k != "status"}


def _invalid(name: str, field: str, problem: str) -> errors.Invalid:
    return errors.Invalid(
        f'{KIND}.{GROUP} "{name}" is invalid: {field}: {problem}',
        name,
        [{"reason": "FieldValueInvalid", "message": problem, "field": field}],
        resource=RESOURCE,
    )


async def _json_body(request: web.Request) -> Any:
    text = await request.text()
    try:
        return jsonio.loads(text) if text else None
    except ValueError as e:
        raise errors.BadRequest(f"the request body is not JSON: {e}") from e
