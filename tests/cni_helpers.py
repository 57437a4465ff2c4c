"""Shared pieces of the CNI tests: an in-memory handler, the two shims, CNI inputs.

`InMemoryHandler` is the test stand-in for the daemon's handler (tests only):
it knows which pods are in a topology, records the pods it was told about and
logs each call, so a test asserts what the runtime would see and what the
daemon was told.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from meshwire.control.cni.protocol import CniError, CniRequest, ErrorCode

REPO = Path(__file__).resolve().parents[1]
C_SHIM = REPO / "cext" / "build" / "meshwire-cni"
PYTHON_SHIM = (sys.executable, "-m", "meshwire.control.cni.shim")

PREV_RESULT: dict[str, Any] = {
    "cniVersion": "1.0.0",
    "interfaces": [
        {"name": "eth0", "mac": "0a:58:0a:f4:00:05", "sandbox": "/var/run/netns/cni-1234"},
        {"name": "veth\u00e9", "mac": "de:ad:be:ef:00:01"},
    ],
    "ips": [{"address": "10.244.0.5/24", "gateway": "10.244.0.1", "interface": 0}],
    "routes": [{"dst": "0.0.0.0/0"}],
    "dns": {"nameservers": ["10.96.0.10"], "search": ["default.svc.cluster.local"]},
}


@functools.cache
def build_c_shim() -> Path:
    """The C shim, built by its build step if missing or older than its source
    (checked once per test session)."""
    subprocess.run(["bash", "scripts/build.d/20-cni-shim.sh"], cwd=REPO, check=True)
    return C_SHIM


def shim_command(kind: str) -> tuple[str, ...]:
    """ "c": the built C shim; "python": the twin; anything else: a path to a shim binary."""
    if kind == "c":
        return (str(build_c_shim()),)
    return PYTHON_SHIM if kind == "python" else (kind,)


def network_config(version: str = "1.0.0", **extra: Any) -> dict[str, Any]:
    return {"cniVersion": version, "name": "kindnet", "type": "meshnet", **extra}


def cni_env(
    command: str,
    *,
    pod: str = "default/r1",
    container: str = "c0ffee01",
    netns: str = "/var/run/netns/cni-1234",
    ifname: str = "eth0",
) -> dict[str, str]:
    """The environment a runtime gives a plugin for `pod` ("ns/name", or "" for none)."""
    env = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": container,
        "CNI_NETNS": netns,
        "CNI_IFNAME": ifname,
        "CNI_PATH": "/opt/cni/bin",
    }
    if pod:
        namespace, name = pod.split("/")
        env["CNI_ARGS"] = (
            f"IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name};"
            f"K8S_POD_INFRA_CONTAINER_ID={container}"
        )
    return env


@dataclass
class ShimRun:
    exit: int
    stdout: bytes

    @property
    def result(self) -> Any:
        return json.loads(self.stdout) if self.stdout.strip() else None


async def run_shim(
    kind: str,
    env: Mapping[str, str],
    stdin: bytes | Mapping[str, Any],
    socket: str = "",
    cwd: Path | None = None,
) -> ShimRun:
    """Execs the `kind` shim (see shim_command) as a runtime would, in directory `cwd`;
    `socket` sets MESHWIRE_CNI_SOCKET. Runs without blocking the loop that serves the
    endpoint."""
    data = stdin if isinstance(stdin, bytes) else json.dumps(stdin).encode()
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
    if socket:
        full_env["MESHWIRE_CNI_SOCKET"] = socket
    proc = await asyncio.create_subprocess_exec(
        *shim_command(kind),
        env=full_env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(data), 60)
    assert proc.returncode is not None
    assert not stderr or kind == "python", stderr
    return ShimRun(exit=proc.returncode, stdout=stdout)


@dataclass(frozen=True)
class Recorded:
    container_id: str
    netns: str
    ifname: str


@dataclass
class InMemoryHandler:
    """A `CniHandler` over a set of pods ("ns/name") that are in some topology.

    `failures[command]` makes that command raise; `slow` names pods whose ADD
    sets `waiting` and then waits until `release` is set.
    """

    in_topology: set[str] = field(default_factory=set)
    pods: dict[str, Recorded] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    failures: dict[str, CniError] = field(default_factory=dict)
    slow: set[str] = field(default_factory=set)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    waiting: asyncio.Event = field(default_factory=asyncio.Event)
    gc_kept: list[tuple[str, str]] = field(default_factory=list)

    def _enter(self, command: str, request: CniRequest | None) -> str:
        key = request.pod.key if request and request.pod else ""
        self.calls.append(f"{command}({key})")
        if command in self.failures:
            raise self.failures[command]
        return key

    async def add(self, request: CniRequest) -> None:
        key = self._enter("ADD", request)
        if key not in self.in_topology:
            return
        if key in self.slow:
            self.waiting.set()
            await self.release.wait()
        self.pods[key] = Recorded(request.container_id, request.netns, request.ifname)

    async def delete(self, request: CniRequest) -> None:
        key = self._enter("DEL", request)
        known = self.pods.get(key)
        if known and known.container_id == request.container_id:
            del self.pods[key]

    async def check(self, request: CniRequest) -> None:
        key = self._enter("CHECK", request)
        if key in self.in_topology and key not in self.pods:
            raise CniError(ErrorCode.UNKNOWN_CONTAINER, f"pod {key} was never added")

    async def status(self) -> None:
        self._enter("STATUS", None)

    async def gc(self, request: CniRequest) -> None:
        self._enter("GC", request)
        valid = {(a.container_id, a.ifname) for a in request.valid_attachments}
        self.gc_kept[:] = sorted(valid)
        for key, rec in list(self.pods.items()):
            if (rec.container_id, rec.ifname) not in valid:
                del self.pods[key]


@dataclass
class CannedDaemon:
    """A fake daemon on `path` that records each request frame and answers `answer`
    verbatim (any bytes, malformed ones included), then closes."""

    path: str
    answer: bytes = b'{"exit":0,"stdout":""}\n'
    frames: list[bytes] = field(default_factory=list)
    _server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.frames.append(await reader.read())
        writer.write(self.answer)
        await writer.drain()
        writer.close()

    async def __aenter__(self) -> CannedDaemon:
        self._server = await asyncio.start_unix_server(self._serve, path=self.path)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        os.unlink(self.path)


def temp_dir() -> Path:
    """A fresh directory under /tmp with the tests' unique prefix; remove it when done."""
    return Path(tempfile.mkdtemp(prefix=f"mwt{os.urandom(4).hex()}-"))


@pytest.fixture
def node() -> Iterator[Path]:
    """A node's CNI folders in a temp dir: bin/ (its /opt/cni/bin), net.d/ (its /etc/cni/net.d)."""
    root = temp_dir()
    (root / "bin").mkdir()
    (root / "net.d").mkdir()
    yield root
    shutil.rmtree(root, ignore_errors=True)
