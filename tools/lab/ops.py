"""Disturbing a running lab the way a cluster would: a pod restarts, a pod moves, a daemon
dies, the API server restarts, a node drops off the network for a while.

Each operation records its effect in the state file as it goes, so `down`
stays exact. A pod operation returns once every link of the pod is up at both
ends (bounded by its `wait`), so the next command meets a wired pod.
Without daemons (`up --no-daemon`) the pod operations only redo the namespaces
and the pod's processes. `kill-daemon` and `kill-api` touch no pod's process.
"""

from __future__ import annotations

import json
import signal
import time

from meshwire.base import hostport
from meshwire.tools.lab import nodes, pods, processes, software
from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.lab_names import LabNames
from meshwire.tools.lab.links import lab_links, topologies_of
from meshwire.tools.lab.probe import http_get
from meshwire.tools.lab.runtime import Runtime
from meshwire.tools.lab.state import LabDir, LabState, PodRecord
from meshwire.tools.lab.up import LINKS_TIMEOUT, start_api, start_daemon, wait_links, wait_ready

# A partition longer than this is a node lost, not a partition the lab waits out.
MAX_PARTITION = 600.0
# Seconds between two looks at the daemons' `/placement` of a pod just moved.
PLACEMENT_POLL = 0.01


def restart_pod(
    lab: LabDir, state: LabState, runtime: Runtime, name: str, wait: float = LINKS_TIMEOUT
) -> str:
    """The pod's processes stopped, CNI DEL, a new namespace, CNI ADD with a new container
    id, on the same node; then its processes started again and its `exec` run."""
    pod = state.pod(name)
    shim = runtime.cni_argv() if state.with_daemons else None
    software.stop(lab, state, pod)
    pods.detach(lab, state, pod, shim)
    pods.recreate_netns(lab, state, pod)
    pods.attach(lab, state, pod, shim)
    _wait_pod_links(lab, state, pod, wait)
    _start_software(lab, state, pod)
    return f"pod {pod.key} restarted on {pod.node} (container {pod.container_id[:12]})"


def move_pod(
    lab: LabDir,
    state: LabState,
    runtime: Runtime,
    name: str,
    node: str,
    wait: float = LINKS_TIMEOUT,
) -> str:
    """As `restart_pod`, with the CNI DEL on the pod's node and the ADD on `node`."""
    pod = state.pod(name)
    if node not in state.nodes:
        raise LabError(f"lab {state.name}: node {node!r} is not one of {', '.join(state.nodes)}")
    shim = runtime.cni_argv() if state.with_daemons else None
    old = pod.node
    software.stop(lab, state, pod)
    pods.detach(lab, state, pod, shim)
    pod.node = node
    pods.recreate_netns(lab, state, pod)
    pods.attach(lab, state, pod, shim)
    _wait_pod_links(lab, state, pod, wait)
    _start_software(lab, state, pod)
    return f"pod {pod.key} moved from {old} to {node}"


def _start_software(lab: LabDir, state: LabState, pod: PodRecord) -> None:
    software.start(lab, state, pod)
    software.run_exec(lab, state, pod)


def _wait_pod_links(lab: LabDir, state: LabState, pod: PodRecord, wait: float) -> None:
    """Until every node's daemon has read the pod's new placement, and every link with
    an end on the pod is up at both ends (daemons only; a `wait` of 0 returns at once).

    The first wait matters for the far ends on other nodes: until their daemon
    has read the move, the ends it still has are the old ones, which it may yet
    take down (a peer gone longer than `reconcile.debounce`) and build again."""
    if not state.with_daemons or wait <= 0:
        return
    deadline = time.monotonic() + wait
    _wait_placement_seen(lab, state, pod, deadline)
    placement = {k: p.node for k, p in state.pods.items()}
    links = lab_links(topologies_of(state.topologies), placement, state.inter_node_link_type)
    mine = [link for link in links if pod.key in (link.a.pod, link.b.pod)]
    wait_links(state, LabNames(state.name), mine, max(0.0, deadline - time.monotonic()))


def _wait_placement_seen(lab: LabDir, state: LabState, pod: PodRecord, deadline: float) -> None:
    """Until every node's daemon that answers says (`/placement`) it has read the pod's
    current placement and derived it. A daemon that does not answer is not waited
    for: one that starts again lists what is there."""
    want = (state.nodes[pod.node].ip, str(pods.sandbox_path(lab, pod)))
    path = f"/placement?pod={pod.namespace}/{pod.name}"
    waiting = set(state.nodes)
    token = state.token()
    while True:
        for node in sorted(waiting):
            record = state.nodes[node]
            host, port = hostport.split(record.metrics)
            answer = http_get(host, port, path, netns=record.netns, token=token)
            if answer is None:
                waiting.discard(node)
            elif answer[0] == 200:
                seen = json.loads(answer[1])
                if (seen["src_ip"], seen["net_ns"]) == want and not seen["deriving"]:
                    waiting.discard(node)
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise LabError(
                f"pod {pod.key}: the daemons of {', '.join(sorted(waiting))} have not read "
                f"its placement ({want[0]}, {want[1]}) yet"
            )
        time.sleep(PLACEMENT_POLL)


def kill_daemon(lab: LabDir, state: LabState, runtime: Runtime, node: str) -> str:
    """SIGKILL the node's daemon (not its workers, as a crash would) and start a new one."""
    if node not in state.nodes:
        raise LabError(f"lab {state.name}: node {node!r} is not one of {', '.join(state.nodes)}")
    record = state.process(f"daemon/{node}")
    if not state.with_daemons or record is None:
        raise LabError(f"lab {state.name}: node {node} runs no daemon (lab up --no-daemon)")
    processes.kill_leader(record)
    start_daemon(lab, state, runtime, node)
    wait_ready(state, node)
    new = state.process(f"daemon/{node}")
    assert new is not None
    return f"node {node}: daemon pid {record.pid} killed, restarted as pid {new.pid}"


def kill_api(lab: LabDir, state: LabState, runtime: Runtime) -> str:
    """SIGKILL the embedded API and start it again from its database, as a control plane
    restart would: every watch breaks, and each daemon lists and watches again by itself.
    Links are not touched; returns once the API listens again."""
    if state.kube_server:
        raise LabError(
            f"lab {state.name}: kill-api restarts the embedded API, and this lab's daemons "
            f"watch the API server {state.kube_server} (lab up --kubeconfig): it does not "
            "apply here"
        )
    record = state.process("api")
    if record is None:
        raise LabError(f"lab {state.name}: no embedded API recorded")
    processes.kill_leader(record)
    start_api(lab, state, LabNames(state.name), runtime)
    new = state.process("api")
    assert new is not None
    return f"embedded API pid {record.pid} killed, restarted as pid {new.pid}"


def partition_node(state: LabState, node: str, seconds: float) -> str:
    """Cut `node` off the underlay for `seconds`, then plug it back (always, even when
    interrupted). Its daemon loses the API and every peer meanwhile; what crosses
    nodes stops, and must come back by itself."""
    if node not in state.nodes:
        raise LabError(f"lab {state.name}: node {node!r} is not one of {', '.join(state.nodes)}")
    if not 0 < seconds <= MAX_PARTITION:
        raise LabError(f"partition of {seconds:g}s: give 0 < seconds <= {MAX_PARTITION:g}")
    names = LabNames(state.name)
    # On an API server outside the lab the node reaches it through its relay, not the
    # underlay: the relay stops too, so the daemon loses the API as a cut-off node does.
    relay = state.process(f"api-relay/{node}") if state.kube_server else None
    nodes.set_plugged(names, node, False)
    try:
        if relay is not None:
            processes.signal_group(relay, signal.SIGSTOP)
        time.sleep(seconds)
    finally:
        if relay is not None:
            processes.signal_group(relay, signal.SIGCONT)
        nodes.set_plugged(names, node, True)
    return f"node {node}: off the underlay for {seconds:g}s, plugged back"
