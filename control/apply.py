"""`meshwire apply -f FILE [--server URL | --kubeconfig F] [-n NAMESPACE]`.

Creates or updates every Topology in FILE through the official `kubernetes`
client, against the embedded API (`--server`) or any cluster (`--kubeconfig`,
or the default kubeconfig / in-cluster config when neither is given).

FILE is read by `meshwire.control.model.load`: meshnet YAML (objects of other
kinds are skipped), a containerlab file or a KNE topology; `-` reads stdin.
`-n` is the namespace of objects that name none; an object whose own
namespace differs from an explicit `-n` is an error, as in kubectl.

An update replaces the spec and keeps the object's metadata and the status the
daemons wrote; it carries the resourceVersion it read and is retried on a 409
Conflict. Prints one line per object, `topology.networkop.co.uk/NAME
created|configured|unchanged`. Exit status: 0 when every object was applied, 1
when any failed (each failure is printed, naming the object, and the others
are still applied), 2 for a file or kubeconfig that cannot be read.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException
from urllib3.exceptions import HTTPError

from meshwire.control.informer.failure import server_message
from meshwire.control.model.load import LoadError, load_file, load_text
from meshwire.control.model.topology import GROUP, PLURAL, VERSION, Topology

# Attempts at a read-modify-write before giving up on an object that keeps changing.
CONFLICT_RETRIES = 5


class ApplyError(Exception):
    """A file whose Topologies cannot be applied as asked; names the object."""


def objects_in(topologies: list[Topology], namespace: str | None) -> list[dict[str, Any]]:
    """The API objects to apply; `namespace` is an explicit `-n`, checked against each."""
    for topology in topologies:
        if namespace is not None and topology.namespace != namespace:
            raise ApplyError(
                f"topology {topology.key}: the namespace from the file "
                f"({topology.namespace!r}) does not match -n {namespace!r}"
            )
    return [_applied(topology.to_dict()) for topology in topologies]


def _applied(obj: dict[str, Any]) -> dict[str, Any]:
    # Status belongs to the daemons; an apply never sends one.
    obj.pop("status", None)
    return obj


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
    parser.add_argument(
        "-f",
        "--filename",
        required=True,
        help="meshnet YAML, containerlab or KNE file; - for stdin",
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--server", help="API server URL, e.g. the embedded one")
    target.add_argument("--kubeconfig", help="kubeconfig file")
    parser.add_argument("-n", "--namespace", help="namespace for objects without one")
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    source = args.filename
    try:
        if source == "-":
            topologies = load_text(sys.stdin.read(), "<stdin>", args.namespace)
        else:
            topologies = load_file(source, args.namespace)
        objects = objects_in(topologies, args.namespace)
    except (LoadError, ApplyError) as e:
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
                f"{e.status} {server_message(e) or e.reason}",
                file=sys.stderr,
            )
            continue
        except HTTPError as e:
            print(f"meshwire apply: cannot reach the API server: {e}", file=sys.stderr)
            return 1
        print(f"topology.{GROUP}/{meta['name']} {outcome}", flush=True)
    return 1 if failed else 0
