"""A failed Kubernetes API call in one line, saying what to do about the usual causes.

The client's own text for an HTTP error spans lines (status, reason, every
header, the raw body); in a log line or a readiness answer a user needs the
status, the server's own message (it names the user and the verb that was
refused) and the fix: the CRD or the RBAC manifest, or the credentials.
"""

from __future__ import annotations

import json

from kubernetes.aio.client.exceptions import ApiException as AsyncApiException
from kubernetes.client.exceptions import ApiException

CREDENTIALS = (
    "the API server rejects the daemon's credentials (api.kubeconfig, or the "
    "in-cluster service account token)"
)
PERMISSION = "the daemon's identity lacks a permission that deploy/rbac.yaml grants"


def describe(err: BaseException, not_found: str = "") -> str:
    """`err` in one line. `not_found` is what a 404 means to the caller (none: the
    server's message alone)."""
    if isinstance(err, TimeoutError):
        return "no answer within the client timeout (half-open connection or hung server)"
    if isinstance(err, ApiException | AsyncApiException):
        hint = {401: CREDENTIALS, 403: PERMISSION, 404: not_found}.get(err.status or 0, "")
        parts = (f"{err.status} {err.reason}", server_message(err), hint)
        return ": ".join(part for part in parts if part)
    return " ".join(str(err).split()) or type(err).__name__


def server_message(err: ApiException | AsyncApiException) -> str:
    """The `message` of the server's Status body ("" when the body is not one)."""
    try:
        body = json.loads(err.body or "")
    except (TypeError, ValueError):
        return ""
    message = body.get("message") if isinstance(body, dict) else None
    return message if isinstance(message, str) else ""
