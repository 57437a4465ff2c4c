"""The PATCH bodies a client may send for a custom resource, applied to a JSON value.

- `application/merge-patch+json` (RFC 7386): what the official Python client's
  `patch_namespaced_custom_object` sends for a dict body.
- `application/json-patch+json` (RFC 6902): a list of operations; the client
  sends it only for a list body.

Strategic merge patch is refused with 415, as kube-apiserver refuses it for
custom resources. A malformed patch raises `BadRequest` naming the operation
and path; a failed `test` operation raises `Invalid` (422), as kube does, its
cause naming the operation's path.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from meshwire.control.common.media import JSON_PATCH, MERGE_PATCH
from meshwire.tools.api import errors

# An array index in a JSON pointer (RFC 6901): ASCII digits, no leading zero.
_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]*")


def apply(content_type: str, target: dict[str, Any], patch: Any) -> dict[str, Any]:
    """Returns the patched copy of `target`; `target` itself is not changed."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media == MERGE_PATCH:
        if not isinstance(patch, dict):
            raise errors.BadRequest("merge patch: the body must be a JSON object")
        merged = merge_patch(target, patch)
        assert isinstance(merged, dict)
        return merged
    if media == JSON_PATCH:
        result = json_patch(target, patch)
        if not isinstance(result, dict):
            raise errors.BadRequest("json patch: the result must be a JSON object")
        return result
    raise errors.UnsupportedMediaType(
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{JSON_PATCH}, {MERGE_PATCH}"
    )


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, `null` deletes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 operations add, remove, replace, move, copy and test, applied in order."""
    if not isinstance(operations, list):
        raise errors.BadRequest("json patch: the body must be a JSON array of operations")
    doc = copy.deepcopy(target)
    for i, op in enumerate(operations):
        if not isinstance(op, dict) or not isinstance(op.get("path"), str):
            raise errors.BadRequest(f"json patch: operation {i}: needs a string 'path'")
        doc = _operation(doc, op, f"json patch: operation {i} ({op.get('op')} {op['path']})")
    return doc


def _operation(doc: Any, op: dict[str, Any], where: str) -> Any:
    kind = op.get("op")
    path = _pointer(op["path"], where)
    if kind in ("add", "replace", "test") and "value" not in op:
        raise errors.BadRequest(f"{where}: needs a 'value'")
    if kind == "add":
        return _add(doc, path, copy.deepcopy(op["value"]), where)
    if kind == "remove":
        return _remove(doc, path, where)
    if kind == "replace":
        doc = _remove(doc, path, where)
        return _add(doc, path, copy.deepcopy(op["value"]), where)
    if kind == "test":
        if _get(doc, path, where) != op["value"]:
            # The field is the operation's path as the client wrote it (a JSON pointer).
            field = op["path"] or "(the whole object)"
            cause = {"reason": "FieldValueInvalid", "message": "test failed", "field": field}
            raise errors.Invalid(f"{where}: test failed", causes=[cause])
        return doc
    if kind in ("move", "copy"):
        source = _pointer(str(op.get("from", "")), where)
        value = copy.deepcopy(_get(doc, source, where))
        if kind == "move":
            doc = _remove(doc, source, where)
        return _add(doc, path, value, where)
    raise errors.BadRequest(f"{where}: unknown op {kind!r}")


def _pointer(text: str, where: str) -> list[str]:
    if text == "":
        return []
    if not text.startswith("/"):
        raise errors.BadRequest(f"{where}: a path must start with '/'")
    return [part.replace("~1", "/").replace("~0", "~") for part in text[1:].split("/")]


def _index(container: list[Any], token: str, where: str, *, end_ok: bool) -> int:
    if end_ok and token == "-":
        return len(container)
    if not _ARRAY_INDEX.fullmatch(token) or int(token) > len(container) - (0 if end_ok else 1):
        raise errors.BadRequest(f"{where}: no list index {token!r}")
    return int(token)


def _parent(doc: Any, path: list[str], where: str) -> Any:
    return _get(doc, path[:-1], where)


def _get(doc: Any, path: list[str], where: str) -> Any:
    for token in path:
        if isinstance(doc, dict):
            if token not in doc:
                raise errors.BadRequest(f"{where}: no member {token!r}")
            doc = doc[token]
        elif isinstance(doc, list):
            doc = doc[_index(doc, token, where, end_ok=False)]
        else:
            raise errors.BadRequest(f"{where}: cannot descend into a scalar at {token!r}")
    return doc


def _add(doc: Any, path: list[str], value: Any, where: str) -> Any:
    if not path:
        return value
    parent = _parent(doc, path, where)
    if isinstance(parent, dict):
        parent[path[-1]] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, path[-1], where, end_ok=True), value)
    else:
        raise errors.BadRequest(f"{where}: the parent is not an object or a list")
    return doc


def _remove(doc: Any, path: list[str], where: str) -> Any:
    if not path:
        raise errors.BadRequest(f"{where}: cannot remove the whole document")
    parent = _parent(doc, path, where)
    if isinstance(parent, dict):
        if path[-1] not in parent:
            raise errors.BadRequest(f"{where}: no member {path[-1]!r}")
        del parent[path[-1]]
        return doc
    if isinstance(parent, list):
        del parent[_index(parent, path[-1], where, end_ok=False)]
        return doc
    raise errors.BadRequest(f"{where}: the parent is not an object or a list")
