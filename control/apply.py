"""`meshwire apply -f FILE [--server URL | --kubeconfig F] [-n NAMESPACE]`.

Creates or updates every Topology in FILE (the shell, its arguments and exit
statuses are `file_command.py`'s). An update replaces the spec and keeps the
object's metadata and the status the daemons wrote; it carries the
resourceVersion it read and is retried on a 409 Conflict. Prints
`topology.networkop.co.uk/NAME created|configured|unchanged` per object.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from meshwire.control.file_command import run
from meshwire.control.model.topology import GROUP, PLURAL, VERSION

# Attempts at a read-modify-write before giving up on an object that keeps changing.
CONFLICT_RETRIES = 5


def apply_one(api: Any, obj: dict[str, Any]) -> str:
    """Creates or updates one object; returns `created`, `configured` or `unchanged`.

    Raises ApiException for what a retry cannot fix (422 Invalid, 403, ...).
    """
    meta = obj["metadata"]
    target = (GROUP, VERSION, meta["namespace"], PLURAL)
    for _ in range(CONFLICT_RETRIES):
        try:
            current = api.get_namespaced_custom_object(*target, meta["name"])
        except ApiException as e:
            if e.status != 404:
                raise
            try:
                api.create_namespaced_custom_object(*target, obj)
            except ApiException as create_error:
                if create_error.status == 409:
                    continue
                raise
            return "created"
        if current.get("spec") == obj["spec"]:
            return "unchanged"
        body = {**current, "spec": obj["spec"]}
        try:
            api.replace_namespaced_custom_object(*target, meta["name"], body)
        except ApiException as e:
            if e.status in (404, 409):
                continue
            raise
        return "configured"
    raise ApiException(status=409, reason=f"still conflicting after {CONFLICT_RETRIES} attempts")


def main(argv: list[str]) -> int:
    return run("apply", "Create or update the Topology objects in a file.", apply_one, argv)
