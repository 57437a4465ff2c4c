"""`meshwire delete -f FILE [--server URL | --kubeconfig F] [-n NAMESPACE]`.

Deletes every Topology FILE names (the shell, its arguments and exit statuses
are `file_command.py`'s): the file `meshwire apply` took removes what it made.
The daemons then tear down the links of those pods on every node. Prints
`topology.networkop.co.uk/NAME deleted` per object, or `not found` for one
that is already gone: the state asked for holds, so that is not a failure and
a second delete of the same file succeeds.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from meshwire.control.model.topology import GROUP, PLURAL, VERSION
from meshwire.tools.client.file_command import run


def delete_one(api: Any, obj: dict[str, Any]) -> str:
    """Deletes the object named like `obj`; returns `deleted` or `not found`.

    Raises ApiException for any other refusal (403, ...).
    """
    meta = obj["metadata"]
    try:
        api.delete_namespaced_custom_object(GROUP, VERSION, meta["namespace"], PLURAL, meta["name"])
    except ApiException as e:
        if e.status == 404:
            return "not found"
        raise
    return "deleted"


def main(argv: list[str]) -> int:
    return run("delete", "Delete the Topology objects named in a file.", delete_one, argv)
