"""The shell `meshwire apply` and `meshwire delete` share: FILE in, one API call per Topology.

    meshwire apply|delete -f FILE [--server URL | --kubeconfig F] [-n NAMESPACE]

FILE is read by `meshwire.control.model.load`: meshnet YAML (objects of other
kinds are skipped), a containerlab file or a KNE topology; `-` reads stdin.
`-n` is the namespace of objects that name none; an object whose own
namespace differs from an explicit `-n` is an error, as in kubectl. The API is
the embedded one (`--server`) or any cluster (`--kubeconfig`, or the default
kubeconfig / in-cluster config when neither is given), through the official
`kubernetes` client.

Prints one line per object, `topology.networkop.co.uk/NAME OUTCOME`. Exit
status: 0 when every object succeeded, 1 when any failed (each failure is
printed, naming the object, and the others are still done), 2 for a file or
kubeconfig that cannot be read.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException
from urllib3.exceptions import HTTPError

from meshwire.control.informer.failure import server_message
from meshwire.control.model.load import LoadError, load_file, load_text
from meshwire.control.model.topology import GROUP, Topology

# An object of the file (as the API takes it) -> the outcome printed for it;
# raises ApiException for what it could not do.
Operation = Callable[[Any, dict[str, Any]], str]


class FileError(Exception):
    """A file whose Topologies cannot be used as asked; names the object."""


def objects_in(topologies: list[Topology], namespace: str | None) -> list[dict[str, Any]]:
    """The API objects of the file, without status (it belongs to the daemons);
    `namespace` is an explicit `-n`, checked against each."""
    objects = []
    for topology in topologies:
        if namespace is not None and topology.namespace != namespace:
            raise FileError(
                f"topology {topology.key}: the namespace from the file "
                f"({topology.namespace!r}) does not match -n {namespace!r}"
            )
        obj = topology.to_dict()
        obj.pop("status", None)
        objects.append(obj)
    return objects


def run(command: str, description: str, operation: Operation, argv: list[str]) -> int:
    """`meshwire COMMAND` over argv: `operation` on each object of the file, in order."""
    args = _parser(command, description).parse_args(argv)
    prog = f"meshwire {command}"
    try:
        if args.filename == "-":
            topologies = load_text(sys.stdin.read(), "<stdin>", args.namespace)
        else:
            topologies = load_file(args.filename, args.namespace)
        objects = objects_in(topologies, args.namespace)
    except (LoadError, FileError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    try:
        api = _client(args)
    except ConfigException as e:
        print(f"{prog}: kubeconfig: {e}", file=sys.stderr)
        return 2
    failed = 0
    for obj in objects:
        meta = obj["metadata"]
        try:
            outcome = operation(api, obj)
        except ApiException as e:
            failed += 1
            print(
                f"{prog}: topology {meta['namespace']}/{meta['name']}: "
                f"{e.status} {server_message(e) or e.reason}",
                file=sys.stderr,
            )
            continue
        except HTTPError as e:
            print(f"{prog}: cannot reach the API server: {e}", file=sys.stderr)
            return 1
        print(f"topology.{GROUP}/{meta['name']} {outcome}", flush=True)
    return 1 if failed else 0


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


def _parser(command: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"meshwire {command}", description=description)
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
