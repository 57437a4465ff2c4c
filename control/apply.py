"""`meshwire apply -f FILE [--server URL | --kubeconfig F] [-n NAMESPACE]`.

Creates or updates every Topology in FILE through the official `kubernetes`
client, against the embedded API (`--server`) or any cluster (`--kubeconfig`,
or the default kubeconfig / in-cluster config when neither is given).

FILE holds meshnet YAML: Topology objects as separate documents and/or inside
`kind: List` items. Objects of other kinds (Pods, StatefulSets, Namespaces)
are skipped. An object without a namespace goes to `-n` (default `default`);
one whose namespace differs from an explicit `-n` is an error, as in kubectl.

An update replaces the spec (and labels, annotations) and keeps the status the
daemons wrote; it carries the resourceVersion it read, and is retried on a 409
Conflict. Prints one line per object, `topology.networkop.co.uk/NAME
created|configured|unchanged`. Exit status: 0 when every object was applied, 1
when any failed (each failure is printed, naming the object, and the others
are still applied), 2 for a file that cannot be read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException
from urllib3.exceptions import HTTPError

from meshwire.control.model.labfile import LoadError
from meshwire.control.model.topology import API_VERSION, GROUP, KIND, PLURAL, VERSION
from meshwire.control.model.yamlfile import read_documents

# Attempts at a read-modify-write before giving up on an object that keeps changing.
CONFLICT_RETRIES = 5

# The metadata an apply sets; the rest (uid, resourceVersion, ...) belongs to the server.
_APPLIED_METADATA = ("labels", "annotations")


class ApplyError(Exception):
    """A file whose Topologies cannot be applied as written; names the object."""


def topologies_in(documents: list[Any], namespace: str, explicit: bool) -> list[dict[str, Any]]:
    """The Topology objects of meshnet YAML documents, namespaced, in file order.

    `explicit`: `namespace` came from `-n`, so an object in another namespace is an error.
    """
    found: list[dict[str, Any]] = []
    for doc in documents:
        if not isinstance(doc, dict):
            continue
        items = doc.get("items") if doc.get("kind") == "List" else [doc]
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict) or item.get("kind") != KIND:
                continue
            if item.get("apiVersion") != API_VERSION:
                continue
            meta: dict[str, Any] = item.get("metadata") or {}
            if not isinstance(meta, dict):
                raise ApplyError(f"a topology's metadata is not a mapping: {meta!r}")
            own = meta.get("namespace") or namespace
            if not isinstance(meta.get("name"), str) or not meta["name"]:
                raise ApplyError(f"a topology in namespace {own!r} has no metadata.name")
            if explicit and own != namespace:
                raise ApplyError(
                    f"topology {own}/{meta.get('name')}: the namespace from the file ({own!r}) "
                    f"does not match -n {namespace!r}"
                )
            found.append({**item, "metadata": {**meta, "namespace": own}})
    return found


def _same(current: dict[str, Any], desired: dict[str, Any]) -> bool:
    if current.get("spec") != desired.get("spec"):
        return False
    now, want = current.get("metadata", {}), desired.get("metadata", {})
    return all(now.get(key) == want.get(key) for key in _APPLIED_METADATA)


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
        if _same(current, obj):
            return "unchanged"
        rv = current["metadata"]["resourceVersion"]
        body = {**obj, "metadata": {**meta, "resourceVersion": rv}}
        try:
            api.replace_namespaced_custom_object(*target, meta["name"], body)
        except ApiException as e:
            if e.status in (404, 409):
                continue
            raise
        return "configured"
    raise ApiException(status=409, reason=f"still conflicting after {CONFLICT_RETRIES} attempts")


def _client(args: argparse.Namespace) -> Any:
    if args.server:
        configuration = client.Configuration(host=args.server.rstrip("/"))
    else:
        configuration = client.Configuration()
        if args.kubeconfig or "KUBERNETES_SERVICE_HOST" not in os.environ:
            config.load_kube_config(config_file=args.kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.CustomObjectsApi(client.ApiClient(configuration))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="meshwire apply", description="Create or update the Topology objects in a file."
    )
    parser.add_argument("-f", "--filename", required=True, help="meshnet YAML file, - for stdin")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--server", help="API server URL, e.g. the embedded one")
    target.add_argument("--kubeconfig", help="kubeconfig file")
    parser.add_argument("-n", "--namespace", help="namespace for objects without one")
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    source = args.filename
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
        documents = [doc.data for doc in read_documents(text, source)]
        objects = topologies_in(documents, args.namespace or "default", args.namespace is not None)
    except (OSError, LoadError, ApplyError) as e:
        print(f"meshwire apply: {e}", file=sys.stderr)
        return 2
    try:
        api = _client(args)
    except ConfigException as e:
        print(f"meshwire apply: kubeconfig: {e}", file=sys.stderr)
        return 2
    failed = 0
    for obj in objects:
        meta = obj["metadata"]
        try:
            outcome = apply_one(api, obj)
        except ApiException as e:
            failed += 1
            print(
                f"meshwire apply: topology {meta['namespace']}/{meta['name']}: "
                f"{e.status} {_message(e)}",
                file=sys.stderr,
            )
            continue
        except HTTPError as e:
            print(f"meshwire apply: cannot reach the API server: {e}", file=sys.stderr)
            return 1
        print(f"topology.{GROUP}/{meta['name']} {outcome}", flush=True)
    return 1 if failed else 0


def _message(error: ApiException) -> str:
    """The `message` of the server's Status body, else the HTTP reason."""
    try:
        body = json.loads(error.body or "")
    except ValueError:
        return str(error.reason)
    return str(body.get("message", error.reason)) if isinstance(body, dict) else str(error.reason)
