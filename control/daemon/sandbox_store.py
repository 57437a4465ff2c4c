"""The pod sandboxes this node added and has not deleted, kept on disk across daemon restarts.

One small JSON file per pod in `cni.state_dir`, written before the CNI ADD
is answered and removed before the DEL is: a daemon killed at any point
either answered nothing (the runtime retries) or left the file saying what
it answered. Without it a restarted daemon learns what runs here from the
API only, and a placement lost from the API while the daemon was down (a
stale clear, the Topology deleted and created again) is lost for good.

Each record keeps the identity of the sandbox's netns as the ADD found it
(`identity`: st_dev and st_ino of the netns file): the daemon builds links
only in a namespace that still has it (netns_guard.py). A record without one
(written before identities were kept, or of a netns the ADD could not stat)
is loaded, but vouches for no namespace.

The directory belongs on tmpfs (`/run`): a reboot forgets the sandboxes
together with the files. Loading drops a sandbox whose netns path is gone
(the runtime tore it down while the daemon was away) and an unreadable
file, each with a warning.

A CNI command answered before its status write is in the API (the API is
down) relies on the store: an ADD on the pod's file, a DEL on a second kind
of file, one per deleted sandbox (`mark_deleted`), which lets a restarted
daemon clear the placement the API still has of it. A file that cannot be
written is logged, and the command then waits for the API (cni_handler.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SUFFIX = ".json"
DELETED_SUFFIX = ".deleted"


@dataclass(frozen=True, slots=True)
class Sandbox:
    """A pod sandbox on this node: its container and netns path, and what its CNI ADD
    knew of it (nothing more for one held from the API)."""

    container_id: str
    netns: str
    # The CNI network (conflist name) of the ADD; empty when not known (a sandbox
    # held from the API), and then no GC of a network releases it.
    network: str = ""
    # (st_dev, st_ino) of the netns file at the ADD; None when not known (a sandbox
    # held from the API, an old record), and then it vouches for no namespace.
    identity: tuple[int, int] | None = None


class SandboxStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def save(self, key: str, sandbox: Sandbox) -> bool:
        """Record that pod `key` runs here in `sandbox` (replacing any previous one);
        whether the record is on disk."""
        body: dict[str, object] = {
            "pod": key,
            "container_id": sandbox.container_id,
            "netns": sandbox.netns,
            "network": sandbox.network,
        }
        if sandbox.identity is not None:
            body["identity"] = list(sandbox.identity)
        try:
            self._write(self._path(key), body)
        except OSError as exc:
            log.error("pod %s: cannot record its sandbox in %s: %s", key, self.directory, exc)
            return False
        return True

    def remove(self, key: str) -> None:
        """Forget pod `key`; forgetting a pod not recorded is not an error."""
        try:
            self._path(key).unlink(missing_ok=True)
        except OSError as exc:
            log.error("pod %s: cannot remove its sandbox from %s: %s", key, self.directory, exc)

    def mark_deleted(self, key: str, container_id: str) -> bool:
        """Record that this node deleted sandbox `container_id` of pod `key` before the API
        heard of it; whether the record is on disk."""
        path = self._deleted_path(key, container_id)
        try:
            self._write(path, {"pod": key, "container_id": container_id})
        except OSError as exc:
            log.error("pod %s: cannot record the DEL of %s in %s: %s", key, container_id, path, exc)
            return False
        return True

    def load_deleted(self) -> set[tuple[str, str]]:
        """Every (pod key, container id) recorded by `mark_deleted` and not forgotten."""
        try:
            paths = sorted(self.directory.glob(f"*{DELETED_SUFFIX}"))
        except OSError as exc:
            log.error("cannot read the DELs recorded in %s: %s", self.directory, exc)
            return set()
        deleted = set()
        for path in paths:
            entry = _read_deleted(path)
            if entry is None:
                log.warning("dropping %s: not a record of a DEL", path)
                _forget(path)
            else:
                deleted.add(entry)
        return deleted

    def forget_deleted(self, key: str, container_id: str) -> None:
        _forget(self._deleted_path(key, container_id))

    def load(self) -> dict[str, Sandbox]:
        """Every recorded sandbox whose netns still exists, by pod key."""
        try:
            paths = sorted(self.directory.glob(f"*{SUFFIX}"))
        except OSError as exc:
            log.error("cannot read the sandboxes recorded in %s: %s", self.directory, exc)
            return {}
        loaded = {}
        for path in paths:
            entry = _read(path)
            if entry is None:
                log.warning("dropping %s: not a sandbox record", path)
                _forget(path)
                continue
            key, sandbox = entry
            if not os.path.exists(sandbox.netns):
                log.warning(
                    "pod %s: the netns %s of its container %s is gone; forgetting it",
                    key,
                    sandbox.netns,
                    sandbox.container_id,
                )
                _forget(path)
                continue
            loaded[key] = sandbox
        return loaded

    def _write(self, path: Path, body: dict[str, object]) -> None:
        """Write `body` as JSON to `path`, whole or not at all; raises OSError."""
        tmp = path.with_name(path.name + ".tmp")
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(body))
        tmp.replace(path)

    def _path(self, key: str) -> Path:
        # A pod key is "namespace/name"; quoting makes it one unambiguous file name.
        return self.directory / (urllib.parse.quote(key, safe="") + SUFFIX)

    def _deleted_path(self, key: str, container_id: str) -> Path:
        name = urllib.parse.quote(key, safe="") + "." + urllib.parse.quote(container_id, safe="")
        return self.directory / (name + DELETED_SUFFIX)


def _read_json(path: Path) -> dict[str, object] | None:
    """The JSON object in `path`; None if it cannot be read or is not an object."""
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def _read(path: Path) -> tuple[str, Sandbox] | None:
    body = _read_json(path)
    if body is None:
        return None
    pod, container_id, netns = (body.get(k) for k in ("pod", "container_id", "netns"))
    network = body.get("network", "")
    if not all(isinstance(field, str) for field in (pod, container_id, netns, network)):
        return None
    if not (pod and container_id and netns):
        return None
    return str(pod), Sandbox(str(container_id), str(netns), str(network), _identity(body))


def _identity(body: dict[str, object]) -> tuple[int, int] | None:
    """The record's netns identity; None when absent or malformed."""
    identity = body.get("identity")
    if (
        isinstance(identity, list)
        and len(identity) == 2
        and all(isinstance(part, int) and not isinstance(part, bool) for part in identity)
    ):
        return (identity[0], identity[1])
    return None


def _read_deleted(path: Path) -> tuple[str, str] | None:
    body = _read_json(path)
    if body is None:
        return None
    pod, container_id = body.get("pod"), body.get("container_id")
    if not (isinstance(pod, str) and isinstance(container_id, str) and pod and container_id):
        return None
    return pod, container_id


def _forget(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)
