"""The pieces of meshwire a lab runs, behind one small interface.

`lab up` loads the lab file, starts the embedded API, applies the topology,
starts a daemon per node and calls the CNI shim; each of those is another
part of meshwire, reached only through `Runtime`. `MeshwireRuntime` runs the
real commands (docs/design.md §9); tests that exercise the lab's own mechanics
pass a stand-in with the same shape.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Protocol

from meshwire.control.model.load import LoadError, load_file
from meshwire.control.model.topology import Topology
from meshwire.tools.lab.errors import LabError

REPO = Path(__file__).resolve().parents[2]
C_SHIM = REPO / "cext" / "build" / "meshwire-cni"


class Runtime(Protocol):
    # False: build nodes, pods and the API, but start no daemon and call no CNI.
    with_daemons: bool
    # Modules the daemons import, loaded once by `up`'s fork server (forkserver.py).
    preload: tuple[str, ...]

    def load(self, path: Path) -> list[Topology]:
        """The Topology objects of a lab file; raises LabError naming the file."""
        ...

    def api_argv(self, db: Path, listen: str, token_file: Path) -> list[str]:
        """The embedded API on `listen`, asking every request for the token in `token_file`."""
        ...

    def apply_argv(
        self,
        path: Path,
        server: str,
        kubeconfig: Path | None = None,
        token_file: Path | None = None,
    ) -> list[str]:
        """`meshwire apply` of `path` to the embedded API at `server` presenting the token in
        `token_file`, or with `kubeconfig` to the server that names."""
        ...

    def daemon_argv(self, config: Path) -> list[str]: ...

    def cni_argv(self) -> list[str]: ...


def meshwire_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "meshwire.tools.cli", *args]


DAEMON_MODULES = (
    "meshwire.tools.cli",
    "meshwire.control.daemon.command",
    "meshwire.control.daemon.app",
)


class MeshwireRuntime:
    preload: tuple[str, ...] = DAEMON_MODULES

    def __init__(self, with_daemons: bool = True) -> None:
        self.with_daemons = with_daemons

    def load(self, path: Path) -> list[Topology]:
        return load_lab_file(path)

    def api_argv(self, db: Path, listen: str, token_file: Path) -> list[str]:
        return meshwire_argv(
            "api", "serve", "--db", str(db), "--listen", listen, "--token-file", str(token_file)
        )

    def apply_argv(
        self,
        path: Path,
        server: str,
        kubeconfig: Path | None = None,
        token_file: Path | None = None,
    ) -> list[str]:
        if kubeconfig is not None:
            return meshwire_argv("apply", "-f", str(path), "--kubeconfig", str(kubeconfig))
        token = ["--token-file", str(token_file)] if token_file is not None else []
        return meshwire_argv("apply", "-f", str(path), "--server", server, *token)

    def daemon_argv(self, config: Path) -> list[str]:
        return meshwire_argv("daemon", "--config", str(config))

    def cni_argv(self) -> list[str]:
        """The C shim when built (scripts/build.sh), else its Python twin."""
        if C_SHIM.exists():
            return [str(C_SHIM)]
        return [sys.executable, "-m", "meshwire.control.cni.shim"]


def load_lab_file(path: Path) -> list[Topology]:
    """meshnet YAML, containerlab or KNE (`control/model/load.py`); LoadError becomes LabError."""
    try:
        return load_file(path)
    except LoadError as exc:
        raise LabError(f"lab file {exc}") from None
