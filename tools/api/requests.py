"""Which requests the embedded API answered: counted by client address, Kubernetes verb
and resource, so a benchmark or a test can say what a client asked of the API
(no LIST after its sync, no GET per event) the way kube-apiserver's audit log
would.

`verb_of` is pure. Its verbs are kube-apiserver's request verbs:
- `GET` of a collection is `list`, or `watch` when `watch=true` (or `1`);
- `GET` of an object is `get`, `POST` is `create`, `PUT` is `update`, `PATCH`
  is `patch`, `DELETE` of an object is `delete` and of a collection
  `deletecollection`;
- a path that names no resource (discovery documents, `/healthz`) is counted
  with its method in lower case and the path as the resource, as kube's
  non-resource URLs are.
A resource is its plural, with `/<subresource>` when one is named
(`topologies/status`); the group, version, namespace and name are left out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

_TRUE = ("true", "1")
_OBJECT_VERBS = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_COLLECTION_VERBS = {"POST": "create", "DELETE": "deletecollection"}


@dataclass(frozen=True, slots=True)
class RequestKey:
    source: str
    verb: str
    resource: str


def verb_of(method: str, path: str, query: Mapping[str, str]) -> tuple[str, str]:
    """(verb, resource) of one request; see the module doc."""
    parts = [p for p in path.split("/") if p]
    # /apis/<group>/<version>/... or /api/<version>/...
    if parts[:1] == ["apis"]:
        rest = parts[3:]
    elif parts[:1] == ["api"]:
        rest = parts[2:]
    else:
        rest = []
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        return method.lower(), path
    resource = "/".join([rest[0], *rest[2:3]])
    if len(rest) == 1:
        if method == "GET":
            return ("watch" if query.get("watch", "") in _TRUE else "list"), resource
        return _COLLECTION_VERBS.get(method, method.lower()), resource
    return _OBJECT_VERBS.get(method, method.lower()), resource


class RequestCounts:
    """Requests answered so far, by `RequestKey`; a watch counts once, when it opens."""

    def __init__(self) -> None:
        self.counts: Counter[RequestKey] = Counter()

    def count(self, source: str, method: str, path: str, query: Mapping[str, str]) -> None:
        verb, resource = verb_of(method, path, query)
        self.counts[RequestKey(source, verb, resource)] += 1

    def rows(self) -> list[dict[str, str | int]]:
        """Every count as {"source", "verb", "resource", "count"}, sorted by key."""
        return [
            {"source": k.source, "verb": k.verb, "resource": k.resource, "count": n}
            for k, n in sorted(
                self.counts.items(), key=lambda kv: (kv[0].source, kv[0].verb, kv[0].resource)
            )
        ]
