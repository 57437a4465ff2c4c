"""The pieces of meshwire a lab runs, behind one small interface.

`lab up` loads the lab file, starts the embedded API, applies the topology,
starts a daemon per node and calls the CNI shim; each of those is another
part of meshwire, reached only through `Runtime`. `MeshwireRuntime` runs the
real commands (DESIGN.md §9); tests that exercise the lab's own mechanics
pass a stand-in with the same shape.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Protocol

import yaml

from meshwire.control.lab.errors import LabError
from meshwire.control.model.topology import ModelError, Topology

REPO = Path(__file__).resolve().parents[2]
C_SHIM = REPO / "cext" / "build" / "meshwire-cni"


class Runtime(Protocol):
    # False: build nodes, pods and the API, but start no daemon and call no CNI.
    with_daemons: bool

    def load(self, path: Path) -> list[Topology]:
        """The Topology objects of a lab file; raises LabError naming the file."""
        ...

    def api_argv(self, db: Path, listen: str) -> list[str]: ...

    def apply_argv(self, path: Path, server: str) -> list[str]: ...

    def daemon_argv(self, config: Path) -> list[str]: ...

    def cni_argv(self) -> list[str]: ...


def meshwire_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "meshwire.control.cli", *args]


class MeshwireRuntime:
    def __init__(self, with_daemons: bool = True) -> None:
        self.with_daemons = with_daemons

    def load(self, path: Path) -> list[Topology]:
        return read_meshnet_yaml(path)

    def api_argv(self, db: Path, listen: str) -> list[str]:
        return meshwire_argv("api", "serve", "--db", str(db), "--listen", listen)

    def apply_argv(self, path: Path, server: str) -> list[str]:
        return meshwire_argv("apply", "-f", str(path), "--server", server)

    def daemon_argv(self, config: Path) -> list[str]:
        return meshwire_argv("daemon", "--config", str(config))

    def cni_argv(self) -> list[str]:
        """The C shim when built (scripts/build.sh), else its Python twin."""
        if C_SHIM.exists():
            return [str(C_SHIM)]
        return [sys.executable, "-m", "meshwire.control.cni.shim"]


def read_meshnet_yaml(path: Path) -> list[Topology]:
    """Topologies from a meshnet YAML file: documents that are a Topology, a list, or a List.

    TODO(#4): becomes `meshwire.control.model.load.load_file(path)` (which also
    reads containerlab and KNE files) once that lands.
    """
    try:
        docs = list(yaml.safe_load_all(path.read_text()))
    except OSError as exc:
        raise LabError(f"lab file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise LabError(f"lab file {path}: not valid YAML: {exc}") from None
    objects: list[Any] = []
    for doc in docs:
        if isinstance(doc, dict) and "items" in doc:
            objects.extend(doc["items"] or [])
        elif isinstance(doc, list):
            objects.extend(doc)
        elif doc is not None:
            objects.append(doc)
    try:
        return [Topology.from_dict(obj) for obj in objects]
    except ModelError as exc:
        raise LabError(f"lab file {path}: {exc}") from None
