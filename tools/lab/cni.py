"""Calling the CNI shim exactly as a container runtime does.

The shim runs in the host namespace (as kubelet's runtime would), with the CNI
environment and the network config on stdin; `meshwire_socket` in that config
tells it which node daemon to talk to. An error result (non-zero exit, the
spec's JSON error on stdout) is raised as LabError naming the pod, the node
and the shim's message.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from meshwire.tools.lab.errors import LabError

CNI_VERSION = "1.0.0"
IFNAME = "eth0"
# Beyond the daemon's own wait (its cni.add_timeout), for the shim's exec and the answer.
MARGIN = 30.0


@dataclass(frozen=True, slots=True)
class CniCall:
    command: str  # ADD | DEL | CHECK
    container_id: str
    netns: str  # path
    pod_namespace: str
    pod_name: str
    socket: str
    node: str
    timeout: float  # seconds before the call counts as hung: the node's add_timeout + MARGIN


def network_config(socket: str) -> dict[str, Any]:
    return {
        "cniVersion": CNI_VERSION,
        "name": "meshwire-lab",
        "type": "meshnet",
        "meshwire_socket": socket,
    }


def environment(call: CniCall, shim: list[str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        CNI_COMMAND=call.command,
        CNI_CONTAINERID=call.container_id,
        CNI_NETNS=call.netns,
        CNI_IFNAME=IFNAME,
        CNI_ARGS=f"K8S_POD_NAMESPACE={call.pod_namespace};K8S_POD_NAME={call.pod_name}",
        CNI_PATH=str(Path(shim[0]).parent),
    )
    return env


def invoke(shim: list[str], call: CniCall) -> dict[str, Any]:
    """Run the shim for `call`; returns its JSON result ({} when it prints nothing)."""
    what = f"pod {call.pod_namespace}/{call.pod_name}: CNI {call.command} on {call.node}"
    try:
        done = subprocess.run(
            shim,
            input=json.dumps(network_config(call.socket)),
            env=environment(call, shim),
            capture_output=True,
            text=True,
            timeout=call.timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LabError(f"{what}: {exc}") from None
    result = _parse(done.stdout)
    if done.returncode != 0:
        message = result.get("msg") or done.stderr.strip() or f"exit {done.returncode}"
        details = result.get("details")
        raise LabError(f"{what}: {message}" + (f" ({details})" if details else ""))
    return result


def _parse(stdout: str) -> dict[str, Any]:
    try:
        value = json.loads(stdout) if stdout.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
