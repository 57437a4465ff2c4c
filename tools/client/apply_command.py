"""`meshwire apply -f FILE [--server URL | --kubeconfig F] [-n NAMESPACE]`.

Creates or updates every Topology in FILE (the shell, its arguments and exit
statuses are `file_command.py`'s). An update replaces the spec and keeps the
object's metadata and the status the daemons wrote; it carries the
resourceVersion it read and is retried on a 409 Conflict. Prints
`topology.networkop.co.uk/NAME created|configured|unchanged` per object.

A cluster's own Topology CRD may prune fields meshwire's `deploy/crd.yaml`
keeps (KNE's structural schema has no per-link `mtu`): the object the server
answers with then lacks them. Such fields are named in ONE warning on stderr
per run (the exit status stays 0: the server stored all it could), and an
object whose only difference from the file is pruned fields is `unchanged`
(the server's replace is a no-op then).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from kubernetes.client.exceptions import ApiException

from meshwire.control.model.topology import GROUP, PLURAL, VERSION
from meshwire.tools.client.file_command import run

# Attempts at a read-modify-write before giving up on an object that keeps changing.
CONFLICT_RETRIES = 5


class Applier:
    """The apply operation for `file_command.run`; remembers the pruned fields it warned of
    (`run` calls it from several threads)."""

    def __init__(self) -> None:
        self.warned: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, api: Any, obj: dict[str, Any]) -> str:
        outcome, stored = apply_one(api, obj)
        found = set(pruned_paths(obj["spec"], stored.get("spec"), "spec"))
        with self._lock:
            pruned = sorted(found - self.warned)
            self.warned.update(pruned)
        if pruned:
            print(
                f"meshwire apply: warning: the server dropped {', '.join(pruned)}: its "
                f"Topology CRD ({PLURAL}.{GROUP}) does not have these fields, so they take no "
                "effect; deploy/crd.yaml keeps them",
                file=sys.stderr,
                flush=True,
            )
        return outcome


def pruned_paths(sent: Any, stored: Any, path: str) -> list[str]:
    """Paths of the fields in `sent` that `stored` lacks (list items as `[]`)."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return []
        out: list[str] = []
        for key, value in sent.items():
            if key not in stored:
                out.append(f"{path}.{key}")
            else:
                out.extend(pruned_paths(value, stored[key], f"{path}.{key}"))
        return out
    if isinstance(sent, list) and isinstance(stored, list):
        found: list[str] = []
        for mine, theirs in zip(sent, stored, strict=False):
            found.extend(p for p in pruned_paths(mine, theirs, f"{path}[]") if p not in found)
        return found
    return []


def apply_one(api: Any, obj: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Creates or updates one object; returns `created`, `configured` or `unchanged`,
    and the object as the server stored it.

    The create is tried first (one request for a new object, as most are when a lab
    comes up); an object that exists (409), or a create this client may not make
    (403: it may still be allowed to update), is read and replaced.

    Raises ApiException for what a retry cannot fix (422 Invalid, 403, ...).
    """
    meta = obj["metadata"]
    target = (GROUP, VERSION, meta["namespace"], PLURAL)
    for _ in range(CONFLICT_RETRIES):
        try:
            return "created", api.create_namespaced_custom_object(*target, obj)
        except ApiException as create_error:
            if create_error.status not in (403, 409):
                raise
            refused = create_error if create_error.status == 403 else None
        try:
            current = api.get_namespaced_custom_object(*target, meta["name"])
        except ApiException as e:
            if e.status != 404:
                raise
            if refused is not None:
                raise refused from None
            continue  # deleted since the create found it: create it again
        if current.get("spec") == obj["spec"]:
            return "unchanged", current
        body = {**current, "spec": obj["spec"]}
        try:
            replaced = api.replace_namespaced_custom_object(*target, meta["name"], body)
        except ApiException as e:
            if e.status in (404, 409):
                continue
            raise
        # Equal to what was there: the server pruned every difference away.
        return (
            "unchanged" if replaced.get("spec") == current.get("spec") else "configured"
        ), replaced
    raise ApiException(status=409, reason=f"still conflicting after {CONFLICT_RETRIES} attempts")


def main(argv: list[str]) -> int:
    return run("apply", "Create or update the Topology objects in a file.", Applier(), argv)
