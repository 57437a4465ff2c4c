"""API errors as Kubernetes `Status` objects.

Each error carries the HTTP code and the `reason` kube-apiserver uses for the
same situation, so a client's error handling (a 409 retry, a 410 relist) works
here unchanged. `status()` is the JSON body of the error response and, for a
watch, the object of its `ERROR` event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from meshwire.control.model.topology import GROUP, PLURAL


@dataclass(frozen=True, slots=True)
class Resource:
    """What an error is about, as its `details` and messages name it."""

    plural: str
    group: str


TOPOLOGIES = Resource(PLURAL, GROUP)


class ApiError(Exception):
    code = 500
    reason = "InternalError"

    def __init__(
        self,
        message: str,
        name: str = "",
        causes: list[dict[str, str]] | None = None,
        resource: Resource = TOPOLOGIES,
    ):
        super().__init__(message)
        self.message = message
        self.name = name
        self.causes = causes or []
        self.resource = resource

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.name or self.causes:
            details: dict[str, Any] = {
                "group": self.resource.group,
                "kind": self.resource.plural,
            }
            if self.name:
                details["name"] = self.name
            if self.causes:
                details["causes"] = self.causes
            body["details"] = details
        return body


class BadRequest(ApiError):
    code = 400
    reason = "BadRequest"


class NotFound(ApiError):
    code = 404
    reason = "NotFound"


class Unauthorized(ApiError):
    code = 401
    reason = "Unauthorized"


class MethodNotAllowed(ApiError):
    code = 405
    reason = "MethodNotAllowed"


class AlreadyExists(ApiError):
    code = 409
    reason = "AlreadyExists"


class Conflict(ApiError):
    code = 409
    reason = "Conflict"


class Expired(ApiError):
    """A resourceVersion or continue token older than the compacted history."""

    code = 410
    reason = "Expired"


class UnsupportedMediaType(ApiError):
    code = 415
    reason = "UnsupportedMediaType"


class RequestEntityTooLarge(ApiError):
    code = 413
    reason = "RequestEntityTooLarge"


class Invalid(ApiError):
    code = 422
    reason = "Invalid"


def not_found(name: str, resource: Resource = TOPOLOGIES) -> NotFound:
    return NotFound(
        f'{resource.plural}.{resource.group} "{name}" not found', name, resource=resource
    )


def already_exists(name: str, resource: Resource = TOPOLOGIES) -> AlreadyExists:
    return AlreadyExists(
        f'{resource.plural}.{resource.group} "{name}" already exists', name, resource=resource
    )


def conflict(name: str, resource: Resource = TOPOLOGIES) -> Conflict:
    return Conflict(
        f'Operation cannot be fulfilled on {resource.plural}.{resource.group} "{name}": the '
        "object has been modified; please apply your changes to the latest version and try "
        "again",
        name,
        resource=resource,
    )


def invalid(name: str, field: str, problem: str) -> Invalid:
    """`field` is the path of the offending field (`spec.links[3].uid`), or "" if unknown."""
    cause = {"reason": "FieldValueInvalid", "message": problem, "field": field}
    return Invalid(f'Topology.{GROUP} "{name}" is invalid: {problem}', name, [cause])
