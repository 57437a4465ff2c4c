"""Pods as network namespaces, wired by the node daemons through the CNI shim.

A pod's netns is `mwl<lab>-<namespace>.<pod>`. `attach` is what a runtime does
when a pod starts (CNI ADD with a fresh container id); `detach` is what it does
when the pod stops (CNI DEL with the same id). Both record the pod in the
state before acting. `create_all` and `attach_all` do the same for all the
pods of `up`, concurrently and with one state write each. Without daemons
(`--no-daemon`) only the namespaces exist.

As with a real runtime, the CNI_NETNS a sandbox is given names that sandbox
alone: a link in the lab directory, `sandboxes/<namespace>.<pod>.<container
id>`, made before the ADD and removed with the namespace. A node acting late
on a sandbox that is gone then finds nothing, where a shared path would lead
it into the namespace of the pod's next sandbox, perhaps on another node.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from meshwire.tools.lab import netns
from meshwire.tools.lab.cni import CniCall, invoke
from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.lab_names import LabNames, netns_path
from meshwire.tools.lab.state import LabDir, LabState, PodRecord

# Namespaces created and CNI ADDs in flight at once: each is mostly a wait on a
# subprocess or on the node's daemon, so more than the cores; bounded so a
# 1,000-pod lab does not fork 1,000 shims at once.
PARALLEL = 16
# Failed pods named in `attach_all`'s error.
SHOWN = 3
# Hex digits of the container id in a sandbox's path: unique enough in one lab.
SANDBOX_ID = 12


def new_container_id() -> str:
    return secrets.token_hex(32)


def create_netns(lab: LabDir, state: LabState, pod: PodRecord) -> None:
    """Record, then create, the pod's namespace (loopback up, as a runtime leaves it)."""
    if pod.netns not in state.netns:
        state.netns.append(pod.netns)
    state.pods[pod.key] = pod
    lab.save(state)
    netns.create(pod.netns)


def create_all(lab: LabDir, state: LabState, records: list[PodRecord]) -> None:
    """Record every pod in one state write, then create their namespaces, PARALLEL at a time.

    One write for all keeps `up` linear: the state holds the whole topology, so a
    write per pod would make a 1,000-pod lab rewrite it thousands of times.
    """
    for pod in records:
        if pod.netns not in state.netns:
            state.netns.append(pod.netns)
        state.pods[pod.key] = pod
    lab.save(state)
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        list(pool.map(lambda pod: netns.create(pod.netns), records))


def attach_all(
    lab: LabDir,
    state: LabState,
    records: list[PodRecord],
    shim: list[str] | None,
    done: Callable[[PodRecord], None],
) -> None:
    """CNI ADD every pod, PARALLEL at a time, as a node's runtime starts many pods at once.

    `done` is called (in this thread) as each pod's ADD returns. Every ADD is
    tried; then the state is saved once, and the failures raise one LabError
    naming the first few pods and how many failed.
    """
    for pod in records:
        pod.container_id = new_container_id()
        _link_sandbox(lab, pod)
    failed: list[str] = []
    try:
        with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
            futures = {
                pool.submit(_add, lab, state, pod, shim): pod for pod in records if shim is not None
            }
            for future in as_completed(futures):
                error = future.exception()
                if isinstance(error, LabError):
                    failed.append(str(error))
                elif error is not None:
                    raise error
                done(futures[future])
    finally:
        lab.save(state)
    if failed:
        more = f" (and {len(failed) - SHOWN} more)" if len(failed) > SHOWN else ""
        raise LabError(
            f"{len(failed)} of {len(records)} pods failed: " + "; ".join(failed[:SHOWN]) + more
        )


def _add(lab: LabDir, state: LabState, pod: PodRecord, shim: list[str] | None) -> None:
    if shim is not None:
        invoke(shim, _call("ADD", lab, state, pod))


def attach(
    lab: LabDir,
    state: LabState,
    pod: PodRecord,
    shim: list[str] | None,
    on_exec: Callable[[], None] | None = None,
) -> None:
    """CNI ADD the pod on its node with a new container id; `shim` None: no daemons.

    `on_exec` is called right before the shim is run (a benchmark's clock).
    """
    pod.container_id = new_container_id()
    lab.save(state)
    _link_sandbox(lab, pod)
    if shim is not None:
        if on_exec is not None:
            on_exec()
        invoke(shim, _call("ADD", lab, state, pod))


def detach(lab: LabDir, state: LabState, pod: PodRecord, shim: list[str] | None) -> None:
    """CNI DEL the pod from its node; a pod never attached needs nothing."""
    if shim is not None and pod.container_id:
        invoke(shim, _call("DEL", lab, state, pod))
    pod.container_id = ""
    lab.save(state)


def recreate_netns(lab: LabDir, state: LabState, pod: PodRecord) -> None:
    """A restarted pod gets a new namespace, as a new sandbox does; the paths
    its old sandboxes were given go with the old namespace."""
    for link in lab.sandboxes.glob(f"{pod.namespace}.{pod.name}.*"):
        link.unlink(missing_ok=True)
    netns.delete(pod.netns)
    create_netns(lab, state, pod)


def record(names: LabNames, namespace: str, name: str, node: str) -> PodRecord:
    return PodRecord(namespace, name, names.pod_netns(namespace, name), node)


def sandbox_path(lab: LabDir, pod: PodRecord) -> Path:
    """The CNI_NETNS of the pod's current sandbox."""
    return lab.sandboxes / f"{pod.namespace}.{pod.name}.{pod.container_id[:SANDBOX_ID]}"


def _link_sandbox(lab: LabDir, pod: PodRecord) -> None:
    path = sandbox_path(lab, pod)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    path.symlink_to(netns_path(pod.netns))


def _call(command: str, lab: LabDir, state: LabState, pod: PodRecord) -> CniCall:
    return CniCall(
        command=command,
        container_id=pod.container_id,
        netns=str(sandbox_path(lab, pod)),
        pod_namespace=pod.namespace,
        pod_name=pod.name,
        socket=state.nodes[pod.node].socket,
        node=pod.node,
        timeout=state.nodes[pod.node].cni_timeout,
    )
