"""Pods that run an image: their containers in containerd, driven through `ctr`.

Which containerd: the machine's, when one answers at `CONTAINERD_ADDRESS` (ctr's
own variable; default /run/containerd/containerd.sock). Otherwise the lab starts
its own (`containerd`, `containerd-shim-runc-v2` and `runc` on PATH), with its
config, socket, root and state under `<lab directory>/containerd/`, recorded as
the process `containerd` and stopped by PID on `down`. `check` says, before
`up` makes anything, which of these is missing.

Everything the lab makes in containerd is in a containerd namespace of its own
(LabNames.containerd_namespace): the images it imports, its containers, their
snapshots. `remove_all` deletes them and then the namespace; nothing of the
machine's containerd's other namespaces is touched. An image given by
reference must already be in the machine's containerd, in the namespace
`CONTAINERD_NAMESPACE` names (default `default`, where `ctr` and nerdctl put
what they pull): `prepare` copies it into the lab's namespace (an export piped
into an import; containerd shares the blobs). An archive is imported there; it
must hold one image.

A pod's container is a containerd task that joins the pod's namespaces as a
Kubernetes container joins its pause container's: the network namespace the
CNI ADD got, and the UTS (hostname) and IPC namespaces of the pod's holder
(holder.py); its files are the image's plus the lab file's binds, its
processes its own. It runs privileged, as containerlab runs its nodes (a
router sets addresses, routes and sysctls). Its output goes to the pod's
`cmd` log (the shim appends to it). A command run in the pod (`exec`, `lab
exec`) enters the namespaces of the container's first process, as `nsenter`
does (holder.py's `exec`: the exit status, stdin and terminal of any pod),
with the container's environment. runc's state, ctr's FIFOs and the task's
cgroup (`/<namespace>-<id>`, removed with the task) carry the lab's names.
The one thing containerd 1.6 places itself is each shim's socket, under
/run/containerd/s/: it goes when the shim does, and the folders, when the lab's
own containerd made them, go with `down` once empty (remove_host_dirs).

Every failure raises LabError with what `ctr` said.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from meshwire.control.model.podspec import Bind, PodSpec
from meshwire.dataplane.rundir import start_time
from meshwire.tools.lab import images, processes
from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.holder import hostname
from meshwire.tools.lab.lab_names import LabNames, netns_path
from meshwire.tools.lab.probe import wait_until
from meshwire.tools.lab.state import (
    ContainerdRecord,
    ContainerRecord,
    LabDir,
    LabState,
    PodRecord,
    ProcessRecord,
)

DEFAULT_ADDRESS = "/run/containerd/containerd.sock"
ADDRESS_ENV = "CONTAINERD_ADDRESS"
NAMESPACE_ENV = "CONTAINERD_NAMESPACE"
DEFAULT_NAMESPACE = "default"
# What the lab's own containerd needs; with the machine's, `ctr` alone.
OWN_TOOLS = ("containerd", "containerd-shim-runc-v2", "runc", "ctr")
DIRECTORY = "containerd"
ROLE = "containerd"
# A containerd starts in a fraction of a second; a loaded machine may take seconds.
START_TIMEOUT = 30.0
# Seconds a `ctr` command may take: an archive of a few hundred MB imports in seconds.
CTR_TIMEOUT = 300.0
# Seconds for the machine's containerd to answer `ctr version` when `up` looks for it.
PROBE_TIMEOUT = 5.0
POLL = 0.05
SHIM = "containerd-shim-runc-v2"
# Where containerd 1.6's shims put their sockets, whatever its config says.
SHIM_SOCKETS = Path("/run/containerd/s")
# Containers stopped at once by `down`: each is mostly a wait on its task and shim.
PARALLEL = 16


@dataclass(frozen=True, slots=True)
class Plan:
    """Where the lab's images come from, decided before `up` makes anything."""

    ctr: str
    address: str  # the machine's containerd; "" : the lab starts its own
    archives: tuple[str, ...]
    # Each reference as written, by the name it has in the machine's containerd.
    references: dict[str, str]
    user_namespace: str


def check(specs: Iterable[PodSpec]) -> Plan | None:
    """The plan for the specs' images (None: no pod has one); LabError naming what is
    missing: the tools, or an image given by reference that no containerd holds."""
    wanted = sorted({spec.image for spec in specs if spec.image})
    if not wanted:
        return None
    archives = tuple(i for i in wanted if PodSpec(image=i).image_is_archive)
    refs = [i for i in wanted if i not in archives]
    address = os.environ.get(ADDRESS_ENV) or DEFAULT_ADDRESS
    ctr = shutil.which("ctr")
    machine = ctr is not None and _answers(ctr, address)
    missing = [tool for tool in ("ctr",) if shutil.which(tool) is None]
    if not machine:
        missing = [tool for tool in OWN_TOOLS if shutil.which(tool) is None]
    if missing or ctr is None:
        raise LabError(
            f"pods with an image need containerd: {', '.join(missing)} not found on PATH "
            "(Debian: apt-get install containerd)"
        )
    namespace = os.environ.get(NAMESPACE_ENV) or DEFAULT_NAMESPACE
    if refs and not machine:
        raise LabError(
            f"image {refs[0]}: no containerd answers at {address} to hold it; give the "
            "image as an archive path (docker save / OCI tar) for the lab to import"
        )
    found: dict[str, str] = {}
    if refs:
        have = set(_ctr(ctr, address, namespace, "images", "ls", "-q").split())
        for ref in refs:
            name = ref if ref in have else images.normalize(ref)
            if name not in have:
                raise LabError(
                    f"image {ref}: not in containerd's namespace {namespace} at {address} "
                    f"(ctr -n {namespace} images pull or import it first)"
                )
            found[ref] = name
    return Plan(ctr, address if machine else "", archives, found, namespace)


def prepare(lab: LabDir, state: LabState, plan: Plan) -> None:
    """The lab's containerd (its own started when the plan has none) and every image in
    the lab's namespace, each recorded before it is made."""
    directory = lab.path.resolve() / DIRECTORY
    own = not plan.address
    state.containerd = ContainerdRecord(
        address=str(directory / "sock") if own else plan.address,
        namespace=LabNames(state.name).containerd_namespace,
        ctr=plan.ctr,
        directory=str(directory),
        own=own,
    )
    if own:
        made = (SHIM_SOCKETS.parent, SHIM_SOCKETS)
        state.containerd.host_dirs = [str(path) for path in made if not path.exists()]
    lab.save(state)
    directory.mkdir(parents=True, exist_ok=True)
    if own:
        _start_own(lab, state, state.containerd)
    record = state.containerd
    for archive in plan.archives:
        names = images.imported(_import(record, archive))
        if len(names) != 1:
            raise LabError(f"image archive {archive}: holds {len(names)} images, not one")
        state.images[archive] = names[0]
        lab.save(state)
    for ref, name in plan.references.items():
        _copy_image(record, plan.user_namespace, name)
        state.images[ref] = name
        lab.save(state)


def start(
    lab: LabDir,
    state: LabState,
    pod: PodRecord,
    spec: PodSpec,
    holder: int,
    binds: list[Bind],
    log: Path,
) -> None:
    """Create and start the pod's container in the namespaces of its holder (pid `holder`)
    with `binds`, its output appended to `log`; recorded before it is made."""
    record = _record(state)
    image = state.images[spec.image]
    container = ContainerRecord(f"{pod.namespace}.{pod.name}", image)
    state.containers[pod.key] = container
    lab.save(state)
    config = _image_config(record, image)
    args = images.process_args(config, spec.cmd, spec.keeps_entrypoint)
    container.env = images.environment(config, (("HOSTNAME", hostname(pod.name)), *spec.env))
    log = log.resolve()
    log.parent.mkdir(parents=True, exist_ok=True)
    # Privileged, as containerlab runs its nodes: routers set addresses, routes and sysctls.
    argv = ["run", "-d", "--privileged", *_snapshotter(record), *_io(record)]
    argv += ["--runc-root", str(Path(record.directory) / "runc")]
    argv += ["--cgroup", f"/{record.namespace}-{container.id}", "--log-uri", f"file://{log}"]
    argv += ["--with-ns", f"network:{netns_path(pod.netns)}"]
    argv += ["--with-ns", f"uts:/proc/{holder}/ns/uts", "--with-ns", f"ipc:/proc/{holder}/ns/ipc"]
    for key, value in container.env.items():
        argv += ["--env", f"{key}={value}"]
    for bind in binds:
        mode = "ro" if bind.read_only else "rw"
        argv += ["--mount", f"type=bind,src={bind.host},dst={bind.pod},options=rbind:{mode}"]
    ctr(record, *argv, image, container.id, *(args or []))
    container.pid = _task_pid(record, container.id)
    container.start_time = start_time(container.pid) or 0
    container.shim_pid = _shim_pid(record, container.id)
    container.shim_start_time = start_time(container.shim_pid) or 0
    lab.save(state)


def stop(lab: LabDir, state: LabState, pod: PodRecord) -> None:
    """Stop the pod's task (SIGTERM, SIGKILL after processes.STOP_GRACE), delete it and its
    container with its snapshot, then wait for its shim (stopped by PID if it stays); then
    forget it. A container that is gone already is success."""
    container = state.containers.get(pod.key)
    if container is None or state.containerd is None:
        return
    _stop(state.containerd, container)
    del state.containers[pod.key]
    lab.save(state)


def _stop(record: ContainerdRecord, container: ContainerRecord) -> None:
    if is_running(container):
        ctr(record, "task", "kill", "-s", "TERM", container.id, check=False)
        deadline = time.monotonic() + processes.STOP_GRACE
        while is_running(container) and time.monotonic() < deadline:
            time.sleep(POLL)
        ctr(record, "task", "kill", "-s", "KILL", container.id, check=False)
    ctr(record, "task", "delete", "-f", container.id, check=False)
    ctr(record, "containers", "delete", container.id, check=False)
    if ctr(record, "containers", "info", container.id, check=False) != "":
        raise LabError(f"containerd still has the container {container.id}")
    if container.shim_pid:
        shim = ProcessRecord(f"shim/{container.id}", container.shim_pid,
                             container.shim_start_time, [SHIM], "")  # fmt: skip
        wait_until(lambda: not processes.is_running(shim), processes.STOP_GRACE, lambda: None)
        processes.stop(shim)


def remove_all(lab: LabDir, state: LabState) -> list[str]:
    """Every container, image and snapshot of the lab's namespace, then the namespace;
    one line per object removed. The lab's own containerd is stopped by `down` after."""
    record = state.containerd
    if record is None:
        return []
    removed: list[str] = []
    if not _answers(record.ctr, record.address):
        # Its containerd is gone (a crash): what is left of each container goes by PID.
        for key, container in state.containers.items():
            for role, pid, started in (
                (f"container/{key}", container.pid, container.start_time),
                (f"shim/{key}", container.shim_pid, container.shim_start_time),
            ):
                if pid:
                    processes.stop(ProcessRecord(role, pid, started, [], ""))
        return removed
    # All at once: a task that ignores SIGTERM (a shell as its first process) takes
    # processes.STOP_GRACE, which one by one would add up.
    containers = list(state.containers.items())
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        list(pool.map(lambda item: _stop(record, item[1]), containers))
    for key, container in containers:
        del state.containers[key]
        removed.append(f"container {record.namespace}/{container.id}")
    lab.save(state)
    for name in ctr(record, "images", "ls", "-q").split():
        ctr(record, "images", "rm", "--sync", name)
        removed.append(f"image {record.namespace}/{name}")
    ctr(record, "namespaces", "remove", record.namespace, check=False)
    if record.namespace in ctr(record, "namespaces", "ls", "-q").split():
        raise LabError(f"containerd namespace {record.namespace}: not empty, left")
    removed.append(f"containerd namespace {record.namespace}")
    return removed


def remove_host_dirs(record: ContainerdRecord) -> list[str]:
    """The host folders the lab's own containerd's shims made, deepest first, each
    removed when it is empty (another containerd's shims may use it now)."""
    removed = []
    for path in reversed(record.host_dirs):
        with contextlib.suppress(OSError):  # gone, or in use again
            os.rmdir(path)
            removed.append(f"directory {path}")
    return removed


def is_running(container: ContainerRecord) -> bool:
    return bool(container.pid) and start_time(container.pid) == container.start_time


def ctr(record: ContainerdRecord, *args: str, check: bool = True) -> str:
    """`ctr` on the lab's containerd and namespace; its output. With `check`, LabError with
    what it said when it fails; without, "" then."""
    return _ctr(record.ctr, record.address, record.namespace, *args, check=check)


def _ctr(binary: str, address: str, namespace: str, *args: str, check: bool = True) -> str:
    argv = [binary, "-a", address, "-n", namespace, *args]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=CTR_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise LabError(f"ctr {' '.join(args[:2])}: no answer after {CTR_TIMEOUT:.0f}s") from None
    if done.returncode == 0:
        return done.stdout
    if check:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise LabError(f"ctr {' '.join(args[:3])}: {said[-1] if said else done.returncode}")
    return ""


def _argv(record: ContainerdRecord, *args: str) -> list[str]:
    return [record.ctr, "-a", record.address, "-n", record.namespace, *args]


def _answers(binary: str, address: str) -> bool:
    if not Path(address).exists():
        return False
    try:
        done = subprocess.run([binary, "-a", address, "version"], capture_output=True,
                              timeout=PROBE_TIMEOUT)  # fmt: skip
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def _record(state: LabState) -> ContainerdRecord:
    if state.containerd is None:
        raise LabError(f"lab {state.name}: no containerd (no pod had an image at `up`)")
    return state.containerd


def _io(record: ContainerdRecord) -> list[str]:
    """ctr's FIFOs in the lab's containerd directory (its default is /run/containerd/fifo)."""
    return ["--fifo-dir", str(Path(record.directory) / "fifo")]


def _snapshotter(record: ContainerdRecord) -> list[str]:
    return ["--snapshotter", record.snapshotter] if record.snapshotter else []


def _start_own(lab: LabDir, state: LabState, record: ContainerdRecord) -> None:
    """The lab's own containerd: no CRI and no /opt plugin, nothing outside its directory."""
    directory = Path(record.directory)
    config = directory / "config.toml"
    config.write_text(
        "version = 2\n"
        f'root = "{directory / "root"}"\n'
        f'state = "{directory / "state"}"\n'
        'disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.internal.v1.opt"]\n'
        f'[grpc]\n  address = "{record.address}"\n'
        f'[ttrpc]\n  address = "{record.address}.ttrpc"\n'
        '[metrics]\n  address = ""\n'
    )
    binary = shutil.which("containerd") or "containerd"
    started = processes.start(ROLE, [binary, "--config", str(config)], lab.log(ROLE))
    state.processes.append(started)
    lab.save(state)

    def died() -> str | None:
        if processes.is_running(started):
            return None
        return f"containerd exited: {processes.log_tail(Path(started.log))}"

    try:
        up = wait_until(lambda: _answers(record.ctr, record.address), START_TIMEOUT, died)
    except RuntimeError as exc:
        raise LabError(str(exc)) from None
    if not up:
        raise LabError(f"containerd: no answer at {record.address} after {START_TIMEOUT:.0f}s")
    # overlayfs where the lab directory allows it (not on an overlay), else copies.
    plugins = ctr(record, "plugins", "ls")
    overlay = any(line.split()[1:2] == ["overlayfs"] and line.split()[3:4] == ["ok"]
                  for line in plugins.splitlines() if line.strip())  # fmt: skip
    record.snapshotter = "overlayfs" if overlay else "native"
    lab.save(state)


def _import(record: ContainerdRecord, archive: str) -> str:
    """Import `archive` into the lab's namespace, a gzipped one decompressed on the way
    (ctr 1.6 reads plain tar only); ctr's output."""
    opener = gzip.open if archive.endswith((".gz", ".tgz")) else open
    argv = _argv(record, "images", "import", *_snapshotter(record), "-")
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdin is not None
    try:
        with opener(archive, "rb") as source:
            shutil.copyfileobj(source, proc.stdin)
    except BrokenPipeError:
        pass  # ctr stopped reading: its error says why
    except (OSError, EOFError) as exc:
        proc.kill()
        proc.communicate()
        raise LabError(f"image archive {archive}: {exc}") from None
    try:  # communicate closes ctr's stdin: the end of the archive
        out, err = proc.communicate(timeout=CTR_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise LabError(f"image archive {archive}: no import after {CTR_TIMEOUT:.0f}s") from None
    if proc.returncode != 0:
        said = err.decode(errors="replace").strip().splitlines()
        raise LabError(f"image archive {archive}: ctr images import: {said[-1] if said else '?'}")
    return out.decode(errors="replace")


def _copy_image(record: ContainerdRecord, namespace: str, name: str) -> None:
    """Image `name` of containerd namespace `namespace` into the lab's, through a pipe."""
    export = subprocess.Popen(
        [record.ctr, "-a", record.address, "-n", namespace, "images", "export",
         "--platform", f"linux/{images.machine_arch()}", "-", name],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    assert export.stdout is not None
    try:
        done = subprocess.run(
            [*_argv(record, "images", "import", *_snapshotter(record), "-")],
            stdin=export.stdout,
            capture_output=True,
            text=True,
            timeout=CTR_TIMEOUT,
        )
    finally:
        export.stdout.close()
        _, err = export.communicate(timeout=CTR_TIMEOUT)
    if export.returncode != 0 or done.returncode != 0:
        said = (err.decode(errors="replace") + done.stderr).strip().splitlines()
        raise LabError(
            f"image {name}: copy from namespace {namespace}: {said[-1] if said else '?'}"
        )


def _image_config(record: ContainerdRecord, name: str) -> dict[str, Any]:
    """The image's runtime config (its `Entrypoint`, `Cmd`, `Env`, ...)."""
    listed = ctr(record, "images", "ls", f"name=={name}").splitlines()[1:]
    if not listed:
        raise LabError(f"image {name}: not in containerd namespace {record.namespace}")
    kind, digest = listed[0].split()[1:3]
    blob = _blob(record, digest)
    if kind in images.INDEX_TYPES:
        try:
            blob = _blob(record, images.pick_manifest(blob, images.machine_arch()))
        except ValueError as exc:
            raise LabError(f"image {name}: {exc}") from None
    config: dict[str, Any] = _blob(record, blob["config"]["digest"]).get("config") or {}
    return config


def _blob(record: ContainerdRecord, digest: str) -> dict[str, Any]:
    try:
        value: dict[str, Any] = json.loads(ctr(record, "content", "get", digest))
    except ValueError as exc:
        raise LabError(f"containerd content {digest}: not JSON: {exc}") from None
    return value


def _task_pid(record: ContainerdRecord, container: str) -> int:
    for line in ctr(record, "task", "ls").splitlines()[1:]:
        fields = line.split()
        if fields[:1] == [container]:
            return int(fields[1])
    raise LabError(f"container {container}: its task is not listed after it started")


def _shim_pid(record: ContainerdRecord, container: str) -> int:
    """The shim serving `container` for the lab's containerd and namespace (its argv names
    all three); 0 when none is found."""
    wanted = ["-namespace", record.namespace, "-id", container, "-address", record.address]
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            words = argv.split("\0")
            if words[0].endswith(SHIM) and words[1:7] == wanted:
                return int(entry)
    return 0
