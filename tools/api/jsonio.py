"""The embedded API's JSON, through orjson: objects in the database, list and
object responses, and watch events are encoded and decoded here only.

orjson writes compact UTF-8 and reads what `json` reads but NaN, Infinity and
integers beyond 64 bits, which no Kubernetes object holds; a decode error is a
ValueError, as with `json`. It writes nothing nested deeper than 254 levels, so
the API reads and stores nothing deeper than MAX_DEPTH (`too_deep`).
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

# Containers within containers a body or a stored object may have: well past any
# Kubernetes object, well short of orjson's writing limit (254) and of the stack the
# merge patch recurses on.
MAX_DEPTH = 100


def dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


def dumps_bytes(obj: Any) -> bytes:
    return orjson.dumps(obj)


def loads(data: str | bytes) -> Any:
    return orjson.loads(data)


def too_deep(value: Any) -> str | None:
    """The path (`spec.links[0].x`) of the first container in `value` nested deeper than
    MAX_DEPTH, or None. Iterative: any depth orjson reads is safe to ask about."""
    stack = [(value, "", 0)]
    while stack:
        item, where, depth = stack.pop()
        if not isinstance(item, dict | list):
            continue
        if depth >= MAX_DEPTH:
            return where or "<body>"
        if isinstance(item, dict):
            stack.extend(
                (v, f"{where}.{k}" if where else str(k), depth + 1) for k, v in item.items()
            )
        else:
            stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(item))
    return None


def response(obj: Any, status: int = 200) -> web.Response:
    """`obj` as an `application/json` response."""
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")
