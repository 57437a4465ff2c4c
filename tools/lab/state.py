"""The lab directory and its state file: the record `lab down` undoes.

Layout of a lab directory (default `/run/meshwire-lab/<name>`: tmpfs, so it
disappears at reboot together with the namespaces and processes it describes,
and every `meshwire lab` command finds it from any working directory; where
`/run` is not a tmpfs, the default directory is one of its own, tmpfs.py):

    state.json            this file's `LabState` but its topologies, rewritten atomically
    state.lock            held (flock) by each command that changes state.json, around
                          its read and its writes, so two at once lose nothing
    topologies.json       the state's topologies, written once (they never change), as
                          a `kind: List` of API objects: what `up` applies
    api.db                the embedded API's SQLite database
    input/<file name>     a copy of the lab file the lab was built from
    nodes/<node>/config.yaml, nodes/<node>/cni.sock, nodes/<node>/sandboxes/
    auth/                 the lab's CA, CA key and wire key (`meshwire certs init`)
    logs/<role>.log       stdout and stderr of every process the lab started
    containerd/           the lab's own containerd, when it runs one (containerd.py):
                          its config, socket, root and state, runc's state, ctr's FIFOs
    pods/<ns>.<pod>/      files the lab file writes into a pod (KNE config files)

Write-ahead rule: a namespace is recorded *before* it is created, and a
process right after it is spawned (before anything waits on it), so a crash
at any point of `lab up` leaves a state file naming everything to remove.
A lab directory is only ever removed whole when it holds a state file; `up`
refuses a directory that exists and is not empty, so a mistyped `--dir` can
never make `down` delete somebody's files.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from meshwire.control.auth import token as tokens
from meshwire.tools.lab import tmpfs
from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.lab_names import HUB_IP

DEFAULT_ROOT = Path("/run/meshwire-lab")
STATE_FILE = "state.json"
LOCK_FILE = "state.lock"
# The lab file's Topology objects as `up` read them, fixed for the lab's life.
TOPOLOGIES_FILE = "topologies.json"
# In a node's directory: its workers' run directory.
WORKER_DIR = "workers"


@dataclass(slots=True)
class ProcessRecord:
    """A process group the lab started: `pid` leads it (started in a new session)."""

    role: str
    pid: int
    start_time: int
    argv: list[str]
    log: str


@dataclass(slots=True)
class NodeRecord:
    name: str
    netns: str
    ip: str
    config: str
    socket: str
    metrics: str
    # How long (s) a CNI call to this node may take: its cni.add_timeout plus a margin.
    cni_timeout: float = 60.0


@dataclass(slots=True)
class PodRecord:
    namespace: str
    name: str
    netns: str
    node: str
    container_id: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True)
class ContainerdRecord:
    """The containerd the lab's image pods run in (containerd.py)."""

    address: str  # its socket
    namespace: str  # the containerd namespace of the lab's images and containers
    ctr: str  # the absolute path of `ctr`
    directory: str  # the lab's containerd directory: runc's state, ctr's FIFOs
    own: bool  # True: the lab started it (process `containerd`) and stops it on `down`
    snapshotter: str = ""  # "": containerd's default
    # Host folders its shims make that were not there before it (own only): `down`
    # removes each once it is empty.
    host_dirs: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ContainerRecord:
    """A pod's container, recorded before it is created; its task's first process and the
    containerd shim serving it, once they run (pid 0: none yet)."""

    id: str
    image: str  # its reference in the lab's containerd namespace
    # Its processes' environment: the image's, HOSTNAME, the lab file's `env`.
    env: dict[str, str] = field(default_factory=dict)
    pid: int = 0
    start_time: int = 0
    shim_pid: int = 0
    shim_start_time: int = 0


@dataclass(slots=True)
class LabState:
    name: str
    directory: str
    topology_file: str = ""
    # The lab file's Topology objects as `up` read them; never changed afterwards.
    topologies: list[dict[str, Any]] = field(default_factory=list)
    api_port: int = 0  # inside the hub namespace, on HUB_IP
    host_port: int = 0  # the host relay on 127.0.0.1; 0: none (no usable host loopback)
    with_daemons: bool = True
    inter_node_link_type: str = "vxlan"
    # `up --kubeconfig`: the user's kubeconfig (absolute), the server it names, and what
    # `up` created there ("kind/name" or "kind/ns/name", see kube.py), recorded first.
    kubeconfig: str = ""
    kube_server: str = ""
    kube_created: list[str] = field(default_factory=list)
    netns: list[str] = field(default_factory=list)
    processes: list[ProcessRecord] = field(default_factory=list)
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    pods: dict[str, PodRecord] = field(default_factory=dict)
    # What each pod runs (control/model/podspec.py `PodSpec.to_dict`), by pod key; a pod that
    # runs nothing is not here. Fixed for the lab's life.
    software: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Pods with an image: the containerd they run in, each spec's `image` by the reference
    # it has in the lab's containerd namespace, and each pod's container by pod key.
    containerd: ContainerdRecord | None = None
    images: dict[str, str] = field(default_factory=dict)
    containers: dict[str, ContainerRecord] = field(default_factory=dict)
    complete: bool = False

    def token(self) -> str:
        """The lab's token (`LabDir.token`)."""
        return LabDir(Path(self.directory)).token()

    @property
    def api_url(self) -> str:
        """The API as the daemons (and anything inside the hub or a node) reach it."""
        return self.kube_server or f"http://{HUB_IP}:{self.api_port}"

    @property
    def host_url(self) -> str:
        """The API as a command on the host reaches it, "" when there is no host relay."""
        if self.kube_server:
            return self.kube_server
        return f"http://127.0.0.1:{self.host_port}" if self.host_port else ""

    def topology_keys(self) -> list[str]:
        """`ns/name` of each Topology of the lab file, in its order."""
        return [
            f"{(t.get('metadata') or {}).get('namespace', 'default')}/{t['metadata']['name']}"
            for t in self.topologies
        ]

    def process(self, role: str) -> ProcessRecord | None:
        """The newest process started for `role`, if any."""
        for record in reversed(self.processes):
            if record.role == role:
                return record
        return None

    def pod(self, name: str) -> PodRecord:
        """A pod by `name` or `ns/name`; raises LabError naming it when there is none."""
        if name in self.pods:
            return self.pods[name]
        matches = [p for p in self.pods.values() if p.name == name]
        if len(matches) == 1:
            return matches[0]
        what = "is ambiguous (give ns/name)" if matches else "is not in this lab"
        raise LabError(f"lab {self.name}: pod {name!r} {what}")

    def to_dict(self) -> dict[str, Any]:
        """The state as JSON values. The topologies are the state's own lists, not copies
        (they are never changed once `up` read them)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["processes"] = [asdict(p) for p in self.processes]
        out["nodes"] = {k: asdict(v) for k, v in self.nodes.items()}
        out["pods"] = {k: asdict(v) for k, v in self.pods.items()}
        out["containerd"] = asdict(self.containerd) if self.containerd else None
        out["images"] = dict(self.images)
        out["containers"] = {k: asdict(v) for k, v in self.containers.items()}
        out["kube_created"] = list(self.kube_created)
        out["netns"] = list(self.netns)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LabState:
        data = dict(data)
        data["processes"] = [ProcessRecord(**p) for p in data.get("processes", [])]
        data["nodes"] = {k: NodeRecord(**v) for k, v in data.get("nodes", {}).items()}
        data["pods"] = {k: PodRecord(**v) for k, v in data.get("pods", {}).items()}
        if data.get("containerd"):
            data["containerd"] = ContainerdRecord(**data["containerd"])
        data["containers"] = {
            k: ContainerRecord(**v) for k, v in data.get("containers", {}).items()
        }
        return cls(**data)


@dataclass(frozen=True, slots=True)
class LabDir:
    path: Path
    # Mount a tmpfs of its own on the directory when it is not on one already (tmpfs.py):
    # the default directory, whose root is meant to be a tmpfs.
    own_tmpfs: bool = False

    @classmethod
    def locate(cls, name: str, directory: str | None) -> LabDir:
        if directory:
            return cls(Path(directory))
        return cls(DEFAULT_ROOT / name, own_tmpfs=True)

    @property
    def state_file(self) -> Path:
        return self.path / STATE_FILE

    @property
    def topologies_file(self) -> Path:
        return self.path / TOPOLOGIES_FILE

    @property
    def db(self) -> Path:
        return self.path / "api.db"

    @property
    def token_file(self) -> Path:
        """The lab's bearer token (mode 0600, made by `up`): its API asks every request
        for it, its daemons a client of `/links` and `/placement` off their loopback."""
        return self.path / "token"

    def token(self) -> str:
        """The lab's token; "" when it has none (a lab made before tokens)."""
        try:
            return tokens.read(self.token_file)
        except (OSError, ValueError):
            return ""

    def input_copy(self, original: Path) -> Path:
        """Where the lab keeps its copy of the lab file; the name is kept (it hints the format)."""
        return self.path / "input" / original.name

    @property
    def sandboxes(self) -> Path:
        """Where each pod sandbox's CNI_NETNS link lives (see pods.py)."""
        return self.path / "sandboxes"

    def node_dir(self, node: str) -> Path:
        return self.path / "nodes" / node

    def worker_dir(self, node: str) -> Path:
        """The run directory of the node's dataplane workers (`dataplane.run_dir`)."""
        return self.node_dir(node) / WORKER_DIR

    def log(self, role: str) -> Path:
        return self.path / "logs" / f"{role.replace('/', '-')}.log"

    def create(self) -> None:
        """Make the directory; raises LabError if it exists and holds anything."""
        if self.path.exists() and any(self.path.iterdir()):
            what = "a lab (run `meshwire lab down` first)" if self.state_file.exists() else "files"
            raise LabError(f"lab directory {self.path}: already holds {what}")
        # Only the directory itself: its first content is the state file, so a
        # crash right after this leaves an empty directory `down` may remove.
        self.path.mkdir(parents=True, exist_ok=True)
        if self.own_tmpfs and not tmpfs.on_tmpfs(self.path):
            tmpfs.mount(self.path)

    def remove(self, whole: bool) -> bool:
        """Remove the directory, with everything in it when `whole`, else only if empty
        (the lab's own tmpfs is unmounted first); whether it was removed."""
        if not self.path.is_dir():
            return False
        if not whole and any(self.path.iterdir()):
            return False
        tmpfs.unmount(self.path)
        if whole:
            shutil.rmtree(self.path, ignore_errors=True)
        else:
            self.path.rmdir()
        return True

    def exists(self) -> bool:
        return self.state_file.exists()

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the lab's state lock: a command that changes the state takes it before it
        reads the state and keeps it until its last write, so commands run at once (as
        bench/churn.py runs them) never write over each other's changes."""
        with open(self.path / LOCK_FILE, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def load(self) -> LabState:
        """The saved state; raises LabError naming the directory when there is no lab."""
        try:
            data = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            raise LabError(f"no lab in {self.path} (no {STATE_FILE})") from None
        except (OSError, ValueError) as exc:
            raise LabError(f"lab state {self.state_file}: unreadable: {exc}") from None
        if "topologies" not in data:
            data["topologies"] = self._topologies()
        return LabState.from_dict(data)

    def save(self, state: LabState) -> None:
        """Write the state atomically: a crash leaves the old file or the new one.

        The topologies, fixed for the lab's life, go to their own file once, after the
        first state file: the state is saved some 20 times while a lab comes up, and
        a 1,000-pod lab's topologies are most of its bytes. A crash between the two
        leaves a state without topologies, which `down` does not need.
        """
        data = state.to_dict()
        topologies = data.pop("topologies")
        _write_json(self.state_file, data)
        if not self.topologies_file.exists():
            _write_json(self.topologies_file, {"apiVersion": "v1", "kind": "List",
                                               "items": topologies})  # fmt: skip

    def _topologies(self) -> list[dict[str, Any]]:
        try:
            value = json.loads(self.topologies_file.read_text())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise LabError(f"lab topologies {self.topologies_file}: unreadable: {exc}") from None
        if isinstance(value, dict):  # a List; a plain list is the older form
            value = value.get("items")
        return value if isinstance(value, list) else []


def _write_json(path: Path, value: object) -> None:
    """Write `value` to `path` atomically (a temporary file, then a rename)."""
    tmp = path.with_suffix(".tmp")
    # Compact: json's C encoder serves no indented output.
    text = json.dumps(value, separators=(",", ":"))
    with open(tmp, "w") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
