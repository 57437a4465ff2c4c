"""A failed API call in one line: the status, the server's message and the fix."""

from __future__ import annotations

import json

import pytest
from kubernetes.aio.client.exceptions import ApiException as AsyncApiException
from kubernetes.client.exceptions import ApiException

from meshwire.control.informer.failure import CREDENTIALS, PERMISSION, describe


def failed(status: int, reason: str, body: str | None, cls: type = AsyncApiException) -> Exception:
    err = cls(status=status, reason=reason)
    err.body = body
    return err  # type: ignore[no-any-return]


def status_body(message: str) -> str:
    return json.dumps({"kind": "Status", "code": 403, "message": message})


@pytest.mark.parametrize("cls", [AsyncApiException, ApiException])
def test_a_refusal_gives_the_servers_message_and_the_rbac_manifest(cls: type) -> None:
    err = failed(403, "Forbidden", status_body('User "u" cannot watch "topologies"'), cls)
    assert describe(err) == f'403 Forbidden: User "u" cannot watch "topologies": {PERMISSION}'


def test_rejected_credentials_point_at_them() -> None:
    assert describe(failed(401, "Unauthorized", None)) == f"401 Unauthorized: {CREDENTIALS}"


def test_a_404_says_what_the_caller_says_it_means() -> None:
    # A real API server answers an unserved resource with a plain-text body.
    err = failed(404, "Not Found", "404 page not found")
    assert describe(err, not_found="install the CRD") == "404 Not Found: install the CRD"
    assert describe(err) == "404 Not Found"


def test_other_errors_fit_one_line() -> None:
    assert describe(failed(500, "Internal Server Error", "<html>\n</html>")) == (
        "500 Internal Server Error"
    )
    assert describe(ConnectionError("Cannot connect\n  to host")) == "Cannot connect to host"
    assert describe(TimeoutError()).startswith("no answer within the client timeout")
    assert describe(ValueError()) == "ValueError"
