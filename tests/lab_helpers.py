"""Shared pieces of the `meshwire lab` tests: a unique lab, a lab file, stand-in components,
`lab exec` run in the test's process.

`StubRuntime` replaces the parts of meshwire a lab runs (API, apply, daemon,
CNI shim) with tiny real processes, so the lab's own mechanics (namespaces,
underlay, relay, processes, state, down) are exercised for real: the "API" is
`python -m http.server` on 127.0.0.1, each "daemon" an `http.server` inside
its node namespace answering /readyz, the CNI shim `true` (or `false` to make
`up` fail after nodes and daemons exist).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from meshwire.control.model.topology import Topology
from meshwire.tools.lab import command
from meshwire.tools.lab.runtime import load_lab_file

LAB_FILE = """\
apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata: {name: r1}
spec:
  links:
  - {uid: 1, peer_pod: r2, local_intf: eth1, peer_intf: eth1,
     local_ip: 10.0.1.1/24, peer_ip: 10.0.1.2/24}
  - {uid: 2, peer_pod: r3, local_intf: eth2, peer_intf: eth1}
---
apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata: {name: r2}
spec:
  links:
  - {uid: 1, peer_pod: r1, local_intf: eth1, peer_intf: eth1,
     local_ip: 10.0.1.2/24, peer_ip: 10.0.1.1/24}
---
apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata: {name: r3}
spec:
  links:
  - {uid: 2, peer_pod: r1, local_intf: eth1, peer_intf: eth2}
"""


# LAB_FILE with an address on every end: r1 in the middle, linked to r2 (uid 1) and r3 (uid 2).
ADDRESSED_LAB = """\
apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata: {name: r1}
spec:
  links:
  - {uid: 1, peer_pod: r2, local_intf: eth1, peer_intf: eth1,
     local_ip: 10.0.1.1/24, peer_ip: 10.0.1.2/24}
  - {uid: 2, peer_pod: r3, local_intf: eth2, peer_intf: eth1,
     local_ip: 10.0.2.1/24, peer_ip: 10.0.2.3/24}
---
apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata: {name: r2}
spec:
  links:
  - {uid: 1, peer_pod: r1, local_intf: eth1, peer_intf: eth1,
     local_ip: 10.0.1.2/24, peer_ip: 10.0.1.1/24}
---
apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata: {name: r3}
spec:
  links:
  - {uid: 2, peer_pod: r1, local_intf: eth1, peer_intf: eth2,
     local_ip: 10.0.2.3/24, peer_ip: 10.0.2.1/24}
"""


class StubRuntime:
    preload: tuple[str, ...] = ()

    def __init__(self, tmp: Path, cni: str = "true", with_daemons: bool = True) -> None:
        self.with_daemons = with_daemons
        self.cni = cni
        self.ready_dir = tmp / "ready"
        self.ready_dir.mkdir(exist_ok=True)
        (self.ready_dir / "readyz").write_text("ok\n")

    def load(self, path: Path) -> list[Topology]:
        return load_lab_file(path)

    def api_argv(self, db: Path, listen: str, token_file: Path) -> list[str]:
        host, _, port = listen.rpartition(":")
        return _http_server(host, port, self.ready_dir)

    def apply_argv(
        self,
        path: Path,
        server: str,
        kubeconfig: Path | None = None,
        token_file: Path | None = None,
    ) -> list[str]:
        return ["true"]

    def daemon_argv(self, config: Path) -> list[str]:
        listen = yaml.safe_load(config.read_text())["metrics"]["listen"]
        host, _, port = listen.rpartition(":")
        return _http_server(host, port, self.ready_dir)

    def cni_argv(self) -> list[str]:
        return [self.cni]


def _http_server(host: str, port: str, directory: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "http.server",
        port,
        "--bind",
        host,
        "--directory",
        str(directory),
    ]


@dataclass
class Lab:
    name: str
    directory: Path
    file: Path

    @property
    def prefix(self) -> str:
        return f"mwl{self.name}-"

    def args(self, *words: str) -> list[str]:
        return [*words, "--name", self.name, "--dir", str(self.directory)]

    def run(self, *words: str, runtime: StubRuntime | None = None) -> int:
        return command.main(self.args(*words), runtime=runtime)


@contextmanager
def unique_lab(tmp_path: Path, text: str = LAB_FILE) -> Iterator[Lab]:
    """A lab name no other test uses; `lab down` runs on exit even when the test failed."""
    name = "t" + secrets.token_hex(3)[:5]
    file = tmp_path / "lab.yaml"
    file.write_text(text)
    lab = Lab(name, tmp_path / name, file)
    try:
        yield lab
    finally:
        command.main(lab.args("down"))


def host_netns_names(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return [line.split()[0] for line in out.stdout.splitlines() if line.startswith(prefix)]


def host_link_names(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    names = [line.split(":")[1].strip().split("@")[0] for line in out.stdout.splitlines()]
    return [n for n in names if n.startswith(prefix)]


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def in_ns(netns: str, *cmd: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "meshwire.tools.lab.nsexec", netns, "--", *cmd]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)


def lab_exec(lab: Lab, *argv: str) -> subprocess.CompletedProcess[str]:
    """`meshwire lab exec` run in this process (an interpreter start the less), its output
    and errors caught at the file descriptors, which the command in the pod writes to."""
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            rc = command.main(["exec", "--name", lab.name, "--dir", str(lab.directory), *argv])
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(argv, rc, out.read().decode(), err.read().decode())
