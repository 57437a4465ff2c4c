"""List continue tokens: the list's resourceVersion and the last key it returned.

A token is opaque to clients (URL-safe base64 of JSON). Every page of one list
is read at the first page's resourceVersion, so the pages together are one
consistent snapshot; the store answers 410 `Expired` once that version has been
compacted away. A token that does not decode raises `BadRequest` (400).
"""

from __future__ import annotations

import base64
import binascii
import json

from meshwire.tools.api import errors
from meshwire.tools.api.store import Key

_VERSION = "meshwire/v1"


def encode(rv: int, last: Key) -> str:
    raw = json.dumps({"v": _VERSION, "rv": rv, "start": list(last)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode()


def decode(token: str) -> tuple[int, Key]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        rv, (namespace, name) = data["rv"], data["start"]
        if data["v"] != _VERSION or not isinstance(rv, int) or rv <= 0:
            raise ValueError(token)
        return rv, (str(namespace), str(name))
    except (binascii.Error, ValueError, KeyError, TypeError) as e:
        raise errors.BadRequest(f"continue: invalid token {token!r}") from e
