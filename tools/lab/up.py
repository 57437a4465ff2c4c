"""`meshwire lab up`: build a whole lab, recording each object before it is made.

Order: read and check every input (lab file, placement, base config, the
containerd and images of pods that run one, and with `--kubeconfig` the API
server and its Topology CRD) before creating anything; then the lab
directory and state file, the lab's containerd and its images
(containerd.py), the hub, the API and its relay (with `--kubeconfig`: the
namespaces and RBAC objects on the user's server instead, see kube.py);
then, while the topology is applied in the background, the nodes, their
daemons and every pod's namespace; then a wait until each daemon answers
/readyz with 200 and the apply has ended; then CNI ADD of the pods on their
nodes, several at once as a runtime starting many pods does; and finally a
bounded wait until every end of every wired link exists in its pod and is up
with carrier (a gRPC wire's TAP has carrier once both nodes joined it); then
each pod's holder (its hostname, files and PID namespace), its container or
`cmd`, and its `exec` commands in order (software.py). Any failure
raises LabError and leaves the state file complete enough for `lab down`.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from meshwire.base import hostport
from meshwire.control.auth import certs
from meshwire.control.auth import token as tokens
from meshwire.control.model.labfile import LoadError
from meshwire.control.model.podspec import PodSoftware, load_software
from meshwire.control.model.topology import Topology
from meshwire.tools.lab import containerd, daemons, nodes, pods, processes, relay, software
from meshwire.tools.lab.check import end_netns, pod_ends
from meshwire.tools.lab.cni import MARGIN
from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.forkserver import ForkServer
from meshwire.tools.lab.kernel import Ends
from meshwire.tools.lab.lab_names import (
    API_PORT,
    HUB_IP,
    LabNames,
    check_lab_name,
    check_node_count,
    node_ip,
)
from meshwire.tools.lab.links import LabLink, lab_links
from meshwire.tools.lab.nsexec import argv_for
from meshwire.tools.lab.placement import load_placement, place
from meshwire.tools.lab.probe import http_get, tcp_open, wait_until
from meshwire.tools.lab.progress import Progress
from meshwire.tools.lab.runtime import Runtime
from meshwire.tools.lab.state import LabDir, LabState, NodeRecord, ProcessRecord
from meshwire.tools.lab.status import api_statuses

if TYPE_CHECKING:
    from meshwire.tools.lab.kube import KubeLab

API_START_TIMEOUT = 30.0
DAEMON_READY_TIMEOUT = 60.0
LINKS_TIMEOUT = 60.0
APPLY_TIMEOUT = 60.0
# The lab's credentials, under its directory (`meshwire certs init`).
AUTH_DIR = "auth"


@dataclass(frozen=True, slots=True)
class UpOptions:
    file: Path
    nodes: int = 2
    placement: Path | None = None
    config: Path | None = None
    name: str = "lab"
    directory: str | None = None
    # How long (s) to wait for the daemons to realise every link end; 0 skips the wait.
    wait: float = LINKS_TIMEOUT
    # An existing API server's kubeconfig: the daemons watch it instead of an embedded API.
    kubeconfig: Path | None = None


def up(options: UpOptions, runtime: Runtime, progress: Progress) -> LabState:
    names = LabNames(check_lab_name(options.name))
    check_node_count(options.nodes)
    # The daemons' modules load in the fork server while the lab file is read.
    forks = ForkServer(list(runtime.preload)) if runtime.with_daemons else None
    try:
        return _read_and_up(options, runtime, progress, names, forks)
    finally:
        if forks is not None:
            forks.close()


def _read_and_up(
    options: UpOptions,
    runtime: Runtime,
    progress: Progress,
    names: LabNames,
    forks: ForkServer | None,
) -> LabState:
    topologies = runtime.load(options.file)
    if not topologies:
        raise LabError(f"lab file {options.file}: no Topology objects")
    try:
        programs = load_software(options.file)
    except LoadError as exc:
        raise LabError(f"lab file {exc}") from None
    for warning in [*programs.warnings, *_without_pod(programs, topologies)]:
        progress.note(warning)
    in_pods = {t.name for t in topologies}
    images = containerd.check(s for n, s in programs.specs.items() if n in in_pods)
    node_names = [names.node_name(i) for i in range(1, options.nodes + 1)]
    wanted = load_placement(options.placement) if options.placement else {}
    placement = place([t.key for t in topologies], node_names, wanted)
    base = daemons.read_base(options.config)
    kube = None
    if options.kubeconfig:
        from meshwire.tools.lab.kube import KubeLab  # the Kubernetes client: only this lab kind

        kube = KubeLab(options.kubeconfig)
    try:
        if kube is not None:
            kube.check_crd()
        return _up(options, runtime, progress, names, topologies, programs, node_names,
                   placement, base, kube, forks, images)  # fmt: skip
    finally:
        if kube is not None:
            kube.close()


def _up(
    options: UpOptions,
    runtime: Runtime,
    progress: Progress,
    names: LabNames,
    topologies: list[Topology],
    programs: PodSoftware,
    node_names: list[str],
    placement: dict[str, str],
    base: dict[str, object],
    kube: KubeLab | None,
    forks: ForkServer | None,
    images: containerd.Plan | None,
) -> LabState:
    if kube is not None:
        # A `down` just before may still be deleting them: wait before making anything.
        kube.await_namespaces(sorted({t.namespace for t in topologies}), progress.note)
    lab, state = _lab_dir(options, runtime, topologies, programs, base, kube)
    daemon_steps = options.nodes if runtime.with_daemons else 0
    progress.begin(4 + options.nodes + daemon_steps + 1 + len(topologies) + 2 + bool(images))

    if images is not None:
        progress.step("containerd and images")
        containerd.prepare(lab, state, images)

    progress.step(f"hub {names.hub_netns}, bridge {names.bridge} {HUB_IP}")
    state.netns.append(names.hub_netns)
    lab.save(state)
    nodes.create_hub(names)
    applying = _start_api_and_apply(lab, state, names, runtime, progress, topologies, kube)

    # The topology is applied in the background while the nodes, their daemons and the
    # pods' namespaces are made: none of those needs it, and apply keeps only one core busy.
    with applying:
        _start_nodes(lab, state, names, runtime, progress, base, node_names, kube, forks)
        records = [pods.record(names, t.namespace, t.name, placement[t.key]) for t in topologies]
        progress.step(f"{len(records)} pod namespaces")
        pods.create_all(lab, state, records)

        progress.step("daemons ready, topology applied")
        if runtime.with_daemons:
            for node in node_names:
                wait_ready(state, node)
        applying.wait()

    shim = runtime.cni_argv() if runtime.with_daemons else None
    pods.attach_all(
        lab, state, records, shim, lambda pod: progress.step(f"pod {pod.key} on {pod.node}")
    )

    progress.step("links")
    if runtime.with_daemons and options.wait > 0:
        links = lab_links(topologies, placement, state.inter_node_link_type)
        wait_links(state, names, links, options.wait)
    progress.step("pods' hostnames, files and software")
    software.start_all(lab, state, records)
    for pod in records:
        software.run_exec(lab, state, pod)
    state.complete = True
    lab.save(state)
    progress.end()
    return state


def _start_nodes(
    lab: LabDir,
    state: LabState,
    names: LabNames,
    runtime: Runtime,
    progress: Progress,
    base: dict[str, object],
    node_names: list[str],
    kube: KubeLab | None,
    forks: ForkServer | None,
) -> None:
    """Each node's namespace, then (with daemons) each node's daemon; the fork server,
    which starts only daemons, is closed after the last."""
    for i, node in enumerate(node_names, start=1):
        progress.step(f"node {node} {node_ip(i)}")
        _create_node(lab, state, names, base, node, i, kube)
    if runtime.with_daemons:
        for node in node_names:
            progress.step(f"daemon on {node}")
            start_daemon(lab, state, runtime, node, forks)
        if forks is not None:
            forks.close()


def _lab_dir(
    options: UpOptions,
    runtime: Runtime,
    topologies: list[Topology],
    programs: PodSoftware,
    base: dict[str, object],
    kube: KubeLab | None,
) -> tuple[LabDir, LabState]:
    """The lab's directory, made: its state file, API token, CA and a copy of the lab file."""
    lab = LabDir.locate(options.name, options.directory)
    lab.create()
    state = LabState(
        name=options.name,
        directory=str(lab.path.resolve()),
        topology_file=str(options.file.resolve()),
        topologies=[t.to_dict() for t in topologies],
        with_daemons=runtime.with_daemons,
        inter_node_link_type=str(base.get("inter_node_link_type", "vxlan")),
        kubeconfig=str(options.kubeconfig.resolve()) if options.kubeconfig else "",
        kube_server=kube.server if kube is not None else "",
        software={
            t.key: programs.specs[t.name].to_dict() for t in topologies if t.name in programs.specs
        },
    )
    lab.save(state)
    # The lab's API token (mode 0600): only who can read the lab directory's files may
    # use its API, and its daemons' /links and /placement from off their loopback.
    tokens.generate(lab.token_file)
    # The lab's own cluster credentials (control/auth/certs.py): each node's daemon
    # issues its own certificate from this CA.
    certs.init_dir(lab.path / AUTH_DIR, force=True)
    copy = lab.input_copy(options.file)
    copy.parent.mkdir(exist_ok=True)
    shutil.copyfile(options.file, copy)
    return lab, state


def _start_api_and_apply(
    lab: LabDir,
    state: LabState,
    names: LabNames,
    runtime: Runtime,
    progress: Progress,
    topologies: list[Topology],
    kube: KubeLab | None,
) -> Apply:
    """Start the embedded API (or prepare the cluster's: namespaces, ServiceAccount,
    RBAC) and start applying the lab's topology to it, in the background."""
    if kube is None:
        progress.step("embedded API")
        start_api(lab, state, names, runtime)
        progress.step("apply topology")
        _start_host_relay(lab, state, names, progress)
        applying = Apply(
            runtime, lab.topologies_file, names.hub_netns, state.api_url, token_file=lab.token_file
        )
    else:
        progress.step(f"API server {kube.server}: namespaces, ServiceAccount, RBAC")

        def record(entry: str) -> None:
            state.kube_created.append(entry)
            lab.save(state)

        kube.prepare(sorted({t.namespace for t in topologies}), record, progress.note)
        progress.step("apply topology")
        applying = Apply(runtime, lab.topologies_file, kubeconfig=kube.kubeconfig)
    return applying


def _without_pod(programs: PodSoftware, topologies: list[Topology]) -> list[str]:
    """A note for each node that gives software but is no pod (it has no link)."""
    pods = {t.name for t in topologies}
    return [
        f"node {name} has no link, so no pod: what it runs is not run"
        for name in programs.specs
        if name not in pods
    ]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _spawn(lab: LabDir, state: LabState, role: str, argv: list[str]) -> ProcessRecord:
    record = processes.start(role, argv, lab.log(role))
    state.processes.append(record)
    lab.save(state)
    return record


def _died(record: ProcessRecord) -> str | None:
    if processes.is_running(record):
        return None
    return f"{record.role} exited; see {record.log}: {processes.log_tail(Path(record.log))}"


def start_api(lab: LabDir, state: LabState, names: LabNames, runtime: Runtime) -> None:
    """Start the embedded API in the hub on its fixed address, from the lab's database."""
    state.api_port = API_PORT
    lab.save(state)
    listen = f"{HUB_IP}:{API_PORT}"
    argv = runtime.api_argv(lab.db, listen, lab.token_file)
    api = _spawn(lab, state, "api", argv_for(names.hub_netns, argv))
    try:
        ok = wait_until(
            lambda: tcp_open(HUB_IP, API_PORT, netns=names.hub_netns),
            API_START_TIMEOUT,
            lambda: _died(api),
        )
    except RuntimeError as exc:
        raise LabError(f"embedded API: {exc}") from None
    if not ok:
        raise LabError(f"embedded API: not listening on {listen} after {API_START_TIMEOUT:.0f}s")


def _start_host_relay(lab: LabDir, state: LabState, names: LabNames, progress: Progress) -> None:
    """Expose the API on the host's 127.0.0.1; a host without usable loopback only gets a note."""
    try:
        port = _free_port()
    except OSError as exc:
        progress.note(
            f"no API on the host (127.0.0.1: {exc.strerror}); use {state.api_url} "
            f"inside netns {names.hub_netns}"
        )
        return
    argv = relay.argv_for(
        f"127.0.0.1:{port}", state.api_url.removeprefix("http://"), names.hub_netns
    )
    forwarder = _spawn(lab, state, "relay", argv)
    try:
        wait_until(lambda: tcp_open("127.0.0.1", port), API_START_TIMEOUT, lambda: _died(forwarder))
    except RuntimeError as exc:
        progress.note(f"no API on the host: {exc}")
        return
    state.host_port = port
    lab.save(state)


class Apply:
    """`meshwire apply` of the lab's Topology objects (`topologies.json`, the lab file as
    read, which JSON makes quick to read again), running from construction until
    `wait`: from inside the hub, where the embedded API is, so it needs nothing of the
    host; with `kubeconfig`, from the host to the server it names.

    Leaving the `with` block stops an apply still running (an earlier step failed)."""

    def __init__(
        self,
        runtime: Runtime,
        path: Path,
        hub: str | None = None,
        server: str = "",
        kubeconfig: Path | None = None,
        token_file: Path | None = None,
    ) -> None:
        if kubeconfig is not None:
            argv = runtime.apply_argv(path, "", kubeconfig)
            server = str(kubeconfig)
        else:
            assert hub is not None
            argv = argv_for(hub, runtime.apply_argv(path, server, token_file=token_file))
        self._what = f"apply {path} to {server}"
        self._deadline = time.monotonic() + APPLY_TIMEOUT
        try:
            self._proc = subprocess.Popen(
                argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )
        except OSError as exc:
            raise LabError(f"{self._what}: {exc}") from None

    def wait(self) -> None:
        """Until the apply ends; LabError with its message if it failed or overran."""
        try:
            _, err = self._proc.communicate(timeout=max(0.0, self._deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise LabError(f"{self._what}: no answer after {APPLY_TIMEOUT:.0f}s") from None
        if self._proc.returncode != 0:
            raise LabError(f"{self._what}: {err.strip() or self._proc.returncode}")

    def __enter__(self) -> Apply:
        return self

    def __exit__(self, *_: object) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.communicate()


def _create_node(
    lab: LabDir,
    state: LabState,
    names: LabNames,
    base: dict[str, object],
    node: str,
    i: int,
    kube: KubeLab | None = None,
) -> None:
    ns, ip = names.node_netns(node), node_ip(i)
    state.netns.append(ns)
    lab.save(state)
    nodes.create_node(names, node, ip)
    node_dir = lab.node_dir(node)
    config = daemons.node_config(
        dict(base),
        node,
        ip,
        state.api_url,
        node_dir,
        lab.path.resolve() / AUTH_DIR,
        lab.token_file.resolve(),
    )
    if kube is not None:
        kubeconfig = node_dir / "kubeconfig"
        kube.node_kubeconfig(kubeconfig, node, i)
        config["api"] = {**config["api"], "url": "", "kubeconfig": str(kubeconfig)}
        _start_api_relay(lab, state, names, node, kube)
    config_path = node_dir / "config.yaml"
    loaded = daemons.write_config(config, config_path)
    state.nodes[node] = NodeRecord(
        node,
        ns,
        ip,
        str(config_path),
        loaded.cni.socket,
        loaded.metrics.listen,
        loaded.cni.add_timeout + MARGIN,
    )
    lab.save(state)


def _start_api_relay(
    lab: LabDir, state: LabState, names: LabNames, node: str, kube: KubeLab
) -> None:
    """The server's address inside the node's namespace, relayed to the host's (kube.py)."""
    ns, address = names.node_netns(node), kube.address
    nodes.add_local_address(names, node, address)
    listen = hostport.join(address, kube.port)
    relayed = _spawn(lab, state, f"api-relay/{node}", relay.argv_into(listen, ns, listen))
    if not wait_until(
        lambda: tcp_open(address, kube.port, netns=ns), API_START_TIMEOUT, lambda: _died(relayed)
    ):
        raise LabError(f"node {node}: relay to {kube.server} not listening on {listen}")


def start_daemon(
    lab: LabDir, state: LabState, runtime: Runtime, node: str, forks: ForkServer | None = None
) -> None:
    """Start the node's daemon inside its namespace: forked from `forks` when given (`up`),
    else through `nsexec`; the same process either way."""
    record = state.nodes[node]
    role, argv = f"daemon/{node}", runtime.daemon_argv(Path(record.config))
    if forks is None:
        _spawn(lab, state, role, argv_for(record.netns, argv))
        return
    state.processes.append(forks.start(role, record.netns, argv, lab.log(role)))
    lab.save(state)


def wait_ready(state: LabState, node: str) -> None:
    """Wait until the node's daemon answers /readyz with 200; LabError if it dies or times out."""
    record = state.nodes[node]
    daemon = state.process(f"daemon/{node}")
    assert daemon is not None
    host, port = hostport.split(record.metrics)

    def ready() -> bool:
        answer = http_get(host, port, "/readyz", netns=record.netns)
        return answer is not None and answer[0] == 200

    try:
        ok = wait_until(ready, DAEMON_READY_TIMEOUT, lambda: _died(daemon))
    except RuntimeError as exc:
        raise LabError(f"node {node}: daemon: {exc}") from None
    if not ok:
        raise LabError(
            f"node {node}: daemon not ready (/readyz on {record.metrics}) "
            f"after {DAEMON_READY_TIMEOUT:.0f}s; see {daemon.log}"
        )


def wait_links(state: LabState, names: LabNames, links: list[LabLink], timeout: float) -> None:
    """Until every end of every wired link exists and has carrier (one link dump per pod
    namespace a poll); raises LabError naming the ends still down after `timeout`."""
    wired = [link for link in links if not link.unwired]

    def not_up() -> list[str]:
        ends = Ends(end_netns(names, end) for link in wired for end in pod_ends(link))
        out = []
        for link in wired:
            for end in pod_ends(link):
                found = ends.get(end_netns(names, end), end.intf)
                if not found.up:
                    why = "no carrier" if found.admin_up else "down" if found.exists else "missing"
                    out.append(f"{end.pod}:{end.intf} ({why})")
        return out

    if not wait_until(lambda: not not_up(), timeout, lambda: None):
        statuses = api_statuses(state, names) or {}
        errors = [
            f"{pod}: {s['plumbing_error']}"
            for pod, s in statuses.items()
            if s.get("plumbing_error")
        ]
        raise LabError(
            f"lab {state.name}: link ends not up after {timeout:.0f}s: "
            + ", ".join(not_up())
            + ("; plumbing errors: " + "; ".join(errors) if errors else "")
        )
