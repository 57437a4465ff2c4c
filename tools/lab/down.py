"""`meshwire lab down`: remove every process, namespace and file the lab made.

Idempotent, and safe after a crash at any point of `up`: it works from the
state file (which names everything before it exists) and also deletes any
namespace carrying the lab's prefix, so a namespace created after the last
state write still goes, and so does any holder of a namespace with that prefix
that no record names (holder.py). The pods' containers go first, with every image and
snapshot of the lab's containerd namespace and the namespace itself
(containerd.py). Processes are stopped next, the pods' own (their holders
and `cmd`s, together) before the lab's, its own containerd among them
(daemons would otherwise react to their pods vanishing), then the dataplane
workers the daemons left running in their run directories (they outlive a
daemon), then the host folders the lab's own containerd made, then namespaces
(interfaces inside them go with them; the lab puts none in the host's
namespace), then the directory.
Without a state file there are no PIDs to stop: only prefixed namespaces and
an empty lab directory are removed.

A lab on an existing API server (`up --kubeconfig`) has its Topology objects
deleted there once its processes are stopped (no daemon is left to act on
the deletions, or to be refused once its RBAC objects go), then the objects
`up` created (kube.py), through the user's kubeconfig. When that fails (the
server unreachable, the kubeconfig gone), the rest is still removed, but the
lab directory is kept and LabError says what is left: run `down` again once
the server answers.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from meshwire.dataplane import rundir
from meshwire.tools.lab import containerd, holder, netns, processes, software
from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.lab_names import LabNames, netns_path
from meshwire.tools.lab.state import LabDir, LabState


def _delete_from_server(state: LabState) -> list[str]:
    from meshwire.tools.lab.kube import KubeLab  # the Kubernetes client: only this lab kind

    kube = KubeLab(Path(state.kubeconfig))
    try:
        return kube.delete(state.topology_keys(), state.kube_created)
    finally:
        kube.close()


def down(lab: LabDir, names: LabNames) -> list[str]:
    """Tear the lab down; returns one line per object removed (empty: nothing was there)."""
    removed: list[str] = []
    state = lab.load() if lab.exists() else None
    left = ""
    if state is not None:
        removed.extend(containerd.remove_all(lab, state))
        # The pods' processes first, all at once: each pod's holder takes its pod's
        # processes with it, and one by one a big lab would wait on each in turn.
        pods = [r for r in reversed(state.processes) if software.is_pod_process(r)]
        rest = [r for r in reversed(state.processes) if not software.is_pod_process(r)]
        running = {id(r) for r in state.processes if processes.is_running(r)}
        with ThreadPoolExecutor(max_workers=software.PARALLEL) as pool:
            list(pool.map(processes.stop, pods))
        for record in rest:
            processes.stop(record)  # also sweeps a group whose leader is gone
        for record in [*pods, *rest]:
            if id(record) in running:
                removed.append(f"process {record.role} (pid {record.pid})")
        for node in state.nodes:
            for pid in rundir.stop_all(str(lab.worker_dir(node))):
                removed.append(f"process worker/{node} (pid {pid})")
        if state.containerd is not None:
            removed.extend(containerd.remove_host_dirs(state.containerd))
    for pid in holder.stop_strays(netns_path(names.prefix)):
        removed.append(f"process unrecorded pod holder (pid {pid})")
    if state is not None and state.kube_server:
        try:
            removed.extend(_delete_from_server(state))
        except LabError as exc:
            left = str(exc)
    recorded = list(reversed(state.netns)) if state else []
    for name in dict.fromkeys([*recorded, *netns.names_with_prefix(names.prefix)]):
        if name.startswith(names.prefix) and netns.exists(name):
            netns.delete(name)
            removed.append(f"netns {name}")
    if left:
        raise LabError(
            f"lab {names.lab}: {left}; its objects on {state.kube_server if state else ''} are "
            f"left, and so is {lab.path}: run `meshwire lab down` again"
        )
    if lab.remove(whole=state is not None):
        removed.append(f"directory {lab.path}")
    return removed
