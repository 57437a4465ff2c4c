"""The shell `meshwire apply` and `meshwire delete` share: FILE in, one API call per Topology.

    meshwire apply|delete -f FILE [--server URL [--token-file F] | --kubeconfig F]
                          [-n NAMESPACE]

FILE is read by `meshwire.control.model.load`: meshnet YAML (objects of other
kinds are skipped), a containerlab file or a KNE topology; `-` reads stdin.
`-n` is the namespace of objects that name none; an object whose own
namespace differs from an explicit `-n` is an error, as in kubectl. The API is
the embedded one (`--server`) or any cluster (`--kubeconfig`, or the default
kubeconfig / in-cluster config when neither is given), through the official
`kubernetes` client. `--token-file` names a file holding the bearer token to
present to `--server` (a lab's embedded API asks for the one in its
directory).

Prints one line per object, `topology.networkop.co.uk/NAME OUTCOME`, in the
file's order, while up to PARALLEL objects are in flight at once. Exit
status: 0 when every object succeeded, 1 when any failed (each failure is
printed, naming the object, and the others are still done), 2 for a file or
kubeconfig that cannot be read.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException
from urllib3.exceptions import HTTPError

from meshwire.control.auth import token as tokens
from meshwire.control.informer.failure import server_message
from meshwire.control.model.load import LoadError, load_file, load_text
from meshwire.control.model.topology import GROUP, Topology

# An object of the file (as the API takes it) -> the outcome printed for it;
# raises ApiException for what it could not do. Called from several threads.
Operation = Callable[[Any, dict[str, Any]], str]
# Objects in flight at once: each is a round trip to the server, so several keep
# both the client and the server busy (a 1,000-object lab file). The client's
# connection pool holds more than this.
PARALLEL = 8


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
    """`meshwire COMMAND` over argv: `operation` on each object of the file, PARALLEL at a
    time, each printed in the file's order."""
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
    except (OSError, ValueError) as e:
        print(f"{prog}: --token-file: {e}", file=sys.stderr)
        return 2
    failed = 0
    pool = ThreadPoolExecutor(PARALLEL)
    try:
        outcomes = pool.map(lambda obj: _attempt(operation, api, obj), objects)
        for obj, outcome in zip(objects, outcomes, strict=True):
            meta = obj["metadata"]
            if isinstance(outcome, ApiException):
                failed += 1
                print(
                    f"{prog}: topology {meta['namespace']}/{meta['name']}: "
                    f"{outcome.status} {server_message(outcome) or outcome.reason}",
                    file=sys.stderr,
                )
            elif isinstance(outcome, HTTPError):
                print(f"{prog}: cannot reach the API server: {outcome}", file=sys.stderr)
                return 1
            else:
                print(f"topology.{GROUP}/{meta['name']} {outcome}", flush=True)
    finally:
        pool.shutdown(cancel_futures=True)
    return 1 if failed else 0


def _attempt(operation: Operation, api: Any, obj: dict[str, Any]) -> str | Exception:
    """The outcome `operation` printed for `obj`, or the API's or the network's error."""
    try:
        return operation(api, obj)
    except (ApiException, HTTPError) as exc:
        return exc


def _client(args: argparse.Namespace) -> Any:
    if args.server:
        configuration = client.Configuration(host=args.server.rstrip("/"))
        if args.token_file:
            configuration.api_key["BearerToken"] = tokens.header(tokens.read(args.token_file))
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
    parser.add_argument(
        "--token-file", help="with --server: a file holding the bearer token to present"
    )
    parser.add_argument("-n", "--namespace", help="namespace for objects without one")
    return parser
