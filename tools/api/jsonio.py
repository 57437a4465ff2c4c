"""The embedded API's JSON, through orjson: objects in the database, list and
object responses, and watch events are encoded and decoded here only.

orjson writes compact UTF-8 and reads what `json` reads but NaN, Infinity and
integers beyond 64 bits, which no Kubernetes object holds; a decode error is a
ValueError, as with `json`.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web


def dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


def dumps_bytes(obj: Any) -> bytes:
    return orjson.dumps(obj)


def loads(data: str | bytes) -> Any:
    return orjson.loads(data)


def response(obj: Any, status: int = 200) -> web.Response:
    """`obj` as an `application/json` response."""
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")
