"""Pods as network namespaces, wired by the node daemons through the CNI shim.

A pod's netns is `mwl<lab>-<namespace>.<pod>`. `attach` is what a runtime does
when a pod starts (CNI ADD with a fresh container id); `detach` is what it does
when the pod stops (CNI DEL with the same id). Both record the pod in the
state before acting. `create_all` and `attach_all` do the same for all the
pods of `up`, concurrently and with one state write each. Without daemons
(`--no-daemon`) only the namespaces exist.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed

from meshwire.control.lab import netns
from meshwire.control.lab.cni import CniCall, invoke
from meshwire.control.lab.errors import LabError
from meshwire.control.lab.names import LabNames, netns_path
from meshwire.control.lab.state import LabDir, LabState, PodRecord

# Namespaces created and CNI ADDs in flight at once: each is mostly a wait on a
# subprocess or on the node's daemon, so more than the cores; bounded so a
# 1,000-pod lab does not fork 1,000 shims at once.
PARALLEL = 16
# Failed pods named in `attach_all`'s error.
SHOWN = 3


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
    failed: list[str] = []
    try:
        with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
            futures = {
                pool.submit(_add, state, pod, shim): pod for pod in records if shim is not None
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


def _add(state: LabState, pod: PodRecord, shim: list[str] | None) -> None:
    if shim is not None:
        invoke(shim, _call("ADD", state, pod))


def attach(lab: LabDir, state: LabState, pod: PodRecord, shim: list[str] | None) -> None:
    """CNI ADD the pod on its node with a new container id; `shim` None: no daemons."""
    pod.container_id = new_container_id()
    lab.save(state)
    if shim is not None:
        invoke(shim, _call("ADD", state, pod))


def detach(lab: LabDir, state: LabState, pod: PodRecord, shim: list[str] | None) -> None:
    """CNI DEL the pod from its node; a pod never attached needs nothing."""
    if shim is not None and pod.container_id:
        invoke(shim, _call("DEL", state, pod))
    pod.container_id = ""
    lab.save(state)


def recreate_netns(lab: LabDir, state: LabState, pod: PodRecord) -> None:
    """A restarted pod gets a new namespace, as a new sandbox does."""
    netns.delete(pod.netns)
    create_netns(lab, state, pod)


def record(names: LabNames, namespace: str, name: str, node: str) -> PodRecord:
    return PodRecord(namespace, name, names.pod_netns(namespace, name), node)


def _call(command: str, state: LabState, pod: PodRecord) -> CniCall:
    return CniCall(
        command=command,
        container_id=pod.container_id,
        netns=netns_path(pod.netns),
        pod_namespace=pod.namespace,
        pod_name=pod.name,
        socket=state.nodes[pod.node].socket,
        node=pod.node,
        timeout=state.nodes[pod.node].cni_timeout,
    )
