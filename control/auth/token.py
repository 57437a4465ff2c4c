"""Bearer tokens: the shared secret a local HTTP surface asks its clients for.

A token is a random string in a file of mode 0600: whoever can read the file
may use the surface. `generate` makes the file (it never replaces one), `read`
reads it, `presented` checks an `Authorization` header against it in constant
time. A header is `Authorization: Bearer <token>` (`header`), as Kubernetes
clients send a kubeconfig's `token`.
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

# 256 bits, URL-safe: it goes into headers and kubeconfigs as it is.
TOKEN_BYTES = 32
SCHEME = "Bearer "


def generate(path: Path) -> str:
    """A new token written to `path`, created with mode 0600; raises FileExistsError if
    something is there (a token is never silently replaced) and OSError otherwise."""
    token = secrets.token_urlsafe(TOKEN_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    return token


def read(path: str | Path) -> str:
    """The token in `path`; raises OSError, or ValueError for an empty file."""
    token = Path(path).read_text().strip()
    if not token:
        raise ValueError(f"{path}: no token in the file")
    return token


def header(token: str) -> str:
    """The `Authorization` header value that presents `token`."""
    return SCHEME + token


def presented(authorization: str | None, token: str) -> bool:
    """Whether `authorization` (a request's header, None if absent) presents `token`."""
    if not token or authorization is None:
        return False
    scheme, _, presented_token = authorization.partition(" ")
    if scheme.lower() != SCHEME.strip().lower():  # the scheme is case-insensitive (RFC 7235)
        return False
    return hmac.compare_digest(presented_token.strip().encode(), token.encode())
