"""Pods as network namespaces, wired by the node daemons through the CNI shim.

A pod's netns is `mwl<lab>-<namespace>.<pod>`. `attach` is what a runtime does
when a pod starts (CNI ADD with a fresh container id); `detach` is what it does
when the pod stops (CNI DEL with the same id). Both record the pod in the
state before acting. Without daemons (`--no-daemon`) only the namespaces exist.
"""

from __future__ import annotations

import secrets

from meshwire.control.lab import netns
from meshwire.control.lab.cni import CniCall, invoke
from meshwire.control.lab.names import LabNames, netns_path
from meshwire.control.lab.state import LabDir, LabState, PodRecord


def new_container_id() -> str:
    return secrets.token_hex(32)


def create_netns(lab: LabDir, state: LabState, pod: PodRecord) -> None:
    """Record, then create, the pod's namespace (loopback up, as a runtime leaves it)."""
    if pod.netns not in state.netns:
        state.netns.append(pod.netns)
    state.pods[pod.key] = pod
    lab.save(state)
    netns.create(pod.netns)


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
    )
