"""Checks a request body before it reaches the store, as kube-apiserver would.

`admit` returns the object to store: the client's body as sent (so a spec reads
back exactly as written), with `metadata.namespace` filled in from the URL.
It raises `BadRequest` (400) for a body addressed to another kind, namespace or
name than the URL, and `Invalid` (422) naming the offending field
(`spec.links[3].uid`) for an object the Topology model cannot read, with a
link that `validate_topology` rejects, or nested deeper than the store keeps
(`jsonio.MAX_DEPTH`; a patch can make it so). That is stricter than a cluster running
meshnet's CRD, whose schema checks only types: there a bad link is accepted and
reported in the object's status by the daemon.
"""

from __future__ import annotations

import re
from typing import Any

from meshwire.control.model.name_rules import dns_label_problem, dns_subdomain_problem
from meshwire.control.model.topology import API_VERSION, GROUP, KIND, ModelError, Topology
from meshwire.control.model.validate import validate_topology
from meshwire.tools.api import errors, jsonio

# A field path token in a ModelError message: `spec.links[3]`, `uid`.
_FIELD = re.compile(r"[A-Za-z_][\w.\[\]]*")
# An annotation in a ModelError message: `metadata.annotation meshwire.dev/emulation`.
_ANNOTATION = re.compile(r"metadata\.annotation (\S+)")


def admit(body: Any, namespace: str, name: str | None = None) -> dict[str, Any]:
    """`name` is the name in the URL (PUT, PATCH); None for a create (POST)."""
    if not isinstance(body, dict):
        raise errors.BadRequest("the request body must be a JSON object")
    if body.get("apiVersion") != API_VERSION or body.get("kind") != KIND:
        raise errors.BadRequest(
            f"the object is {body.get('apiVersion')!r}/{body.get('kind')!r}, "
            f"expected {API_VERSION!r}/{KIND!r}"
        )
    meta = body.get("metadata")
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise errors.BadRequest("metadata: expected a JSON object")
    if meta.get("namespace", namespace) not in ("", namespace):
        raise errors.BadRequest(
            "the namespace of the provided object does not match the namespace sent on the "
            f"request ({meta.get('namespace')!r} != {namespace!r})"
        )
    object_name = meta.get("name") or ""
    if name is not None and object_name != name:
        raise errors.BadRequest(
            f"the name of the object ({object_name!r}) does not match the name on the URL "
            f"({name!r})"
        )
    if not isinstance(object_name, str):
        raise errors.invalid("", "metadata.name", "metadata.name: must be a string")
    problem = dns_subdomain_problem(object_name)
    if problem is not None:
        raise errors.invalid(object_name, "metadata.name", f"metadata.name: {problem}")
    problem = dns_label_problem(namespace)
    if problem is not None:
        raise errors.invalid(object_name, "metadata.namespace", f"metadata.namespace: {problem}")
    obj = {**body, "metadata": {**meta, "namespace": namespace}}
    where = jsonio.too_deep(obj)
    if where is not None:
        problem = f"{where}: nested deeper than {jsonio.MAX_DEPTH} levels"
        raise errors.invalid(object_name, where, problem)
    try:
        topology = Topology.from_dict(obj)
    except ModelError as e:
        raise errors.invalid(object_name, _field_of(str(e)), str(e)) from e
    problems = validate_topology(topology).problems
    if problems:
        raise errors.Invalid(
            f'Topology.{GROUP} "{object_name}" is invalid: ' + "; ".join(map(str, problems)),
            object_name,
            [
                {
                    "reason": "FieldValueInvalid",
                    "message": p.message,
                    "field": f"spec.links[{p.index}].{p.field}",
                }
                for p in problems
            ],
        )
    return obj


def _field_of(message: str) -> str:
    """The field path in a ModelError message "topology ns/n: spec.links[0]: uid: problem";
    an annotation is named as kube names it, `metadata.annotations[meshwire.dev/emulation]`
    (what its JSON value holds is not a field)."""
    parts = message.split(": ")[1:]
    fields: list[str] = []
    for part in parts[:-1]:
        annotation = _ANNOTATION.fullmatch(part)
        if annotation:
            fields.append(f"metadata.annotations[{annotation[1]}]")
            break
        if not _FIELD.fullmatch(part):
            break
        fields.append(part)
    return ".".join(fields)
