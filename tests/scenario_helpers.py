"""Shared pieces of the scenario tests: a real lab on one node, what a user would look at.

Two harnesses: `one_node_lab` (the whole `meshwire lab`, for user stories) and
`daemon_node` (the embedded API and one `Daemon` in this process, in a private
netns, pods as `mwt<hex>` namespaces, reached through the real C shim: for the
CNI command paths, where a test needs to hold the API back or read the
daemon's state).

Scenarios run through `meshwire lab` (the embedded API, a real daemon and the
real CNI shim, each pod a network namespace) with every pod on one simulated
node, so every link is a veth. A lab is unique per test (`lab_helpers.unique_lab`)
and `lab down` runs on exit, even on failure; everything the lab creates is
named `mwl<name>-`, inside namespaces, never on the host's own loopback.

What a scenario asserts is what a user sees: interfaces in a pod (name,
ifindex, addresses, up), a ping across a link, `lab status --json`, the
daemon's metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from api_helpers import call, create, get, private_loopback, serving, sync_api, topology
from cni_helpers import PREV_RESULT, ShimRun, cni_env, network_config, run_shim
from lab_helpers import Lab, unique_lab
from pyroute2 import IPRoute

from meshwire.control.auth import certs
from meshwire.control.common.config import load_config
from meshwire.control.daemon.app import Daemon
from meshwire.tools.lab import netns, ops, pods, processes, up
from meshwire.tools.lab.lab_names import LabNames
from meshwire.tools.lab.links import LabLink, lab_links, topologies_of
from meshwire.tools.lab.nsexec import argv_for
from meshwire.tools.lab.probe import http_get
from meshwire.tools.lab.runtime import MeshwireRuntime, meshwire_argv
from meshwire.tools.lab.state import LabDir, LabState
from meshwire.tools.lab.status import gather
from tests.paths import MESHNET

FIXTURES = MESHNET
NODE = "node1"
# Generous bounds for waiting on a condition; never a timing assertion.
WAIT = 15.0
POLL = 0.01
IFF_UP = 0x1


@dataclass(frozen=True, slots=True)
class Interface:
    name: str
    ifindex: int
    kind: str
    up: bool
    alias: str
    addresses: tuple[str, ...]
    mtu: int


@dataclass
class OneNodeLab:
    """A running lab with every pod on `node1`."""

    lab: Lab

    @property
    def names(self) -> LabNames:
        return LabNames(self.lab.name)

    @property
    def dir(self) -> LabDir:
        return LabDir(self.lab.directory)

    def state(self) -> LabState:
        return self.dir.load()

    def pod_netns(self, pod: str, namespace: str = "default") -> str:
        return self.names.pod_netns(namespace, pod)

    @property
    def node_netns(self) -> str:
        return self.names.node_netns(NODE)

    # -- what a user sees -------------------------------------------------

    def interfaces(self, pod: str, namespace: str = "default") -> dict[str, Interface]:
        """Every interface of the pod but lo, read from the kernel now."""
        return read_interfaces(self.pod_netns(pod, namespace))

    def ping(self, pod: str, address: str, namespace: str = "default") -> bool:
        """Whether a ping is answered within 3 s, one sent every 0.2 s until one is.

        Not a single ping: on this kernel the first ARP exchange of a link is now
        and then answered only by its retransmission a second later."""
        argv = ["ping", "-c", "1", "-i", "0.2", "-w", "3", address]
        done = run_in(self.pod_netns(pod, namespace), argv)
        return done.returncode == 0

    def status(self) -> dict[str, Any]:
        """What `meshwire lab status --json` prints."""
        return gather(self.state(), self.names)

    def daemon_get(self, path: str) -> tuple[int, str]:
        """(status, body) of a GET on the node daemon's metrics port."""
        host, _, port = self.state().nodes[NODE].metrics.rpartition(":")
        answer = http_get(host, int(port), path, netns=self.node_netns, token=self.dir.token())
        assert answer is not None, f"no answer to {path} from {NODE}'s daemon"
        return answer

    def metric(self, name: str) -> float:
        """A sample of the node daemon's /metrics (0 when the series is absent)."""
        code, body = self.daemon_get("/metrics")
        assert code == 200, f"/metrics from {NODE}'s daemon: {code}"
        match = re.search(rf"^{re.escape(name)} (\S+)$", body, re.MULTILINE)
        return float(match.group(1)) if match else 0.0

    def links(self) -> list[LabLink]:
        """The links of the lab file, as `lab check` knows them."""
        state = self.state()
        placement = {key: pod.node for key, pod in state.pods.items()}
        return lab_links(topologies_of(state.topologies), placement, state.inter_node_link_type)

    # -- what a user does -------------------------------------------------

    def apply(self, topologies: list[dict[str, Any]]) -> str:
        """`meshwire apply -f` of edited Topology objects, from inside the hub; its output."""
        return self._file_command("apply", topologies)

    def delete(self, topologies: list[dict[str, Any]]) -> str:
        """`meshwire delete -f` of Topology objects, from inside the hub; its output."""
        return self._file_command("delete", topologies)

    def _file_command(self, command: str, topologies: list[dict[str, Any]]) -> str:
        path = self.lab.directory.parent / f"{command}-{time.monotonic_ns()}.yaml"
        path.write_text(yaml.safe_dump_all(topologies))
        server = self.state().api_url
        token = ("--token-file", str(self.dir.token_file))
        argv = argv_for(
            self.names.hub_netns,
            meshwire_argv(command, "-f", str(path), "--server", server, *token),
        )
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, f"{command} failed: {done.stdout} {done.stderr}"
        return done.stdout

    def cni_del(self, pod: str) -> None:
        """The runtime stops the pod: CNI DEL through the shim (the netns stays)."""
        state = self.state()
        pods.detach(self.dir, state, state.pod(pod), MeshwireRuntime().cni_argv())

    def cni_add(self, pod: str) -> None:
        """The runtime starts the pod again in its netns: CNI ADD with a new container id."""
        state = self.state()
        pods.attach(self.dir, state, state.pod(pod), MeshwireRuntime().cni_argv())

    def new_netns(self, pod: str) -> None:
        """The pod's next sandbox gets a new namespace (its old one goes)."""
        state = self.state()
        pods.recreate_netns(self.dir, state, state.pod(pod))

    def restart_pod(self, pod: str) -> float:
        """`lab restart-pod` step by step (DEL, new netns, ADD); returns seconds from
        the ADD's start until every link end of the pod exists and is up (bounded)."""
        state = self.state()
        record = state.pod(pod)
        shim = MeshwireRuntime().cni_argv()
        pods.detach(self.dir, state, record, shim)
        pods.recreate_netns(self.dir, state, record)
        started = time.monotonic()
        pods.attach(self.dir, state, record, shim)
        wait_until(lambda: self.links_up(record.key), f"links of {record.key} up")
        return time.monotonic() - started

    def kill_daemon(self) -> None:
        """`lab kill-daemon node1`: SIGKILL, start again, wait until /readyz says ready."""
        ops.kill_daemon(self.dir, self.state(), MeshwireRuntime(), NODE)

    def restart_daemon(self) -> None:
        """SIGKILL the node's daemon and start it again, without waiting until it is
        ready (it cannot sync while the API is down): see `wait_ready`."""
        self._kill_daemon()
        up.start_daemon(self.dir, self.state(), MeshwireRuntime(), NODE)

    def wait_ready(self) -> None:
        """Until the node's daemon answers /readyz with 200."""
        up.wait_ready(self.state(), NODE)

    @contextlib.contextmanager
    def daemon_down(self) -> Iterator[None]:
        """The node's daemon SIGKILLed for the block, then started again and ready."""
        self._kill_daemon()
        try:
            yield
        finally:
            state = self.state()  # as the block left it: start_daemon saves it
            up.start_daemon(self.dir, state, MeshwireRuntime(), NODE)
            up.wait_ready(state, NODE)

    def _kill_daemon(self) -> None:
        record = self.state().process(f"daemon/{NODE}")
        assert record is not None, f"{NODE} runs no daemon"
        processes.kill_leader(record)

    @contextlib.contextmanager
    def api_down(self) -> Iterator[None]:
        """The embedded API SIGKILLed for the block, then started again and listening."""
        record = self.state().process("api")
        assert record is not None, "the lab runs no API"
        processes.kill_leader(record)
        try:
            yield
        finally:
            # The state as the block left it: start_api saves it.
            up.start_api(self.dir, self.state(), self.names, MeshwireRuntime())

    def kill_api(self) -> None:
        """`lab kill-api`: SIGKILL the embedded API, start it again, wait until it listens."""
        ops.kill_api(self.dir, self.state(), MeshwireRuntime())

    def links_up(self, pod_key: str = "") -> bool:
        """Whether both ends of every link of `pod_key` ("": of every pod) exist and are up.

        "Up" is the kernel's operstate, which follows a link being set up by a
        moment (linkwatch): wait for it, do not assert it at once."""
        for link in self.links():
            if pod_key and pod_key not in (link.a.pod, link.b.pod):
                continue
            for end in (link.a, link.b):
                namespace, _, pod = end.pod.partition("/")
                found = read_interfaces(self.pod_netns(pod, namespace)).get(end.intf)
                if found is None or not found.up:
                    return False
        return True


@contextlib.contextmanager
def one_node_lab(tmp_path: Path, fixture: str, config: str = "") -> Iterator[OneNodeLab]:
    """`meshwire lab up FIXTURE --nodes 1` (a file of meshnet's own tests); down on exit.

    `config`: the daemon config file's text, when not the defaults."""
    text = (FIXTURES / fixture).read_text()
    with unique_lab(tmp_path, text) as lab:
        options = ["--nodes", "1", "--wait", "60"]
        if config:
            path = tmp_path / "daemon.yaml"
            path.write_text(config)
            options += ["--config", str(path)]
        assert lab.run("up", str(lab.file), *options) == 0
        yield OneNodeLab(lab)


def read_interfaces(ns: str) -> dict[str, Interface]:
    """The interfaces of netns `ns` (name or path) but lo; {} when the netns is gone."""

    def read() -> dict[str, Interface]:
        with IPRoute() as ipr:
            addresses: dict[int, list[str]] = {}
            for msg in ipr.get_addr():
                if msg["scope"] != 0:  # link-local (fe80::) addresses come by themselves
                    continue
                address = msg.get_attr("IFA_ADDRESS")
                addresses.setdefault(msg["index"], []).append(f"{address}/{msg['prefixlen']}")
            out = {}
            for msg in ipr.get_links():
                name = msg.get_attr("IFLA_IFNAME")
                if name == "lo":
                    continue
                info = msg.get_attr("IFLA_LINKINFO")
                out[name] = Interface(
                    name=name,
                    ifindex=msg["index"],
                    kind=(info.get_attr("IFLA_INFO_KIND") if info else "") or "",
                    up=bool(msg["flags"] & IFF_UP) and msg.get_attr("IFLA_OPERSTATE") == "UP",
                    alias=msg.get_attr("IFLA_IFALIAS") or "",
                    addresses=tuple(sorted(addresses.get(msg["index"], []))),
                    mtu=msg.get_attr("IFLA_MTU"),
                )
            return out

    try:
        return netns.in_netns(ns, read)
    except FileNotFoundError:
        return {}


def add_foreign(ns: str, name: str, alias: str = "") -> None:
    """An interface in `ns` as a NOS (no alias) or an earlier meshwire (alias) left it.

    A bridge: this kernel has no dummy module, and a bridge is what a NOS makes."""

    def add() -> None:
        with IPRoute() as ipr:
            ipr.link("add", ifname=name, kind="bridge")
            index = ipr.link_lookup(ifname=name)[0]
            if alias:
                ipr.link("set", index=index, ifalias=alias)
            ipr.link("set", index=index, state="up")

    netns.in_netns(ns, add)


def run_in(ns: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv_for(ns, argv), capture_output=True, text=True, timeout=30, check=False
    )


@contextlib.contextmanager
def ping_running(ns: str, address: str, interval: float = 0.01) -> Iterator[Callable[[], str]]:
    """A ping from `ns` to `address` every `interval` s for the block; yields a function
    that stops it and returns its summary (`N packets transmitted, M received, ...`)."""
    argv = argv_for(ns, ["ping", "-i", str(interval), "-W", "1", address])
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def stop() -> str:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
        return next((line for line in out.splitlines() if "transmitted" in line), out)

    try:
        yield stop
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def loss(summary: str) -> tuple[int, int]:
    """(transmitted, received) from ping's summary line."""
    match = re.search(r"(\d+) packets transmitted, (\d+) received", summary)
    assert match, f"no ping summary in {summary!r}"
    return int(match.group(1)), int(match.group(2))


def wait_until(condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(POLL)


def topologies(fixture: str) -> list[dict[str, Any]]:
    """The Topology objects of a fixture file, as dicts a test may edit and apply."""
    out = []
    for document in yaml.safe_load_all((FIXTURES / fixture).read_text()):
        for item in (document or {}).get("items", [document]):
            if item and item.get("kind") == "Topology":
                out.append(item)
    return out


def link_of(topology: dict[str, Any], uid: int) -> dict[str, Any]:
    found: dict[str, Any] = next(x for x in topology["spec"]["links"] if x["uid"] == uid)
    return found


# -- the smaller harness: API + one daemon in this process ------------------------


@dataclass
class DaemonNode:
    """One node: its daemon (in this process), the API it reads, its pods' netns."""

    daemon: Daemon
    socket: str
    api_port: int
    db: str
    prefix: str
    created: list[str]

    def pod_netns(self, pod: str) -> str:
        """A fresh netns for a (re)started pod; removed when the harness ends."""
        name = f"{self.prefix}{pod}-{len(self.created)}"
        netns.create(name)
        self.created.append(name)
        return f"/var/run/netns/{name}"

    async def cni(
        self, command: str, pod: str, container: str = "c0ffee01", netns_path: str = ""
    ) -> ShimRun:
        """The C shim, exec'd as a runtime does, with the previous plugin's result."""
        env = cni_env(command, pod=f"default/{pod}", container=container, netns=netns_path)
        if not netns_path:
            del env["CNI_NETNS"]
        config = network_config("1.1.0", meshwire_socket=self.socket)
        if command in ("ADD", "CHECK"):
            config["prevResult"] = PREV_RESULT
        return await run_shim("c", env, config)

    async def gc(self, *valid: str) -> ShimRun:
        """CNI GC through the C shim, the runtime vouching for sandboxes `valid` only."""
        env = {"CNI_COMMAND": "GC", "CNI_PATH": "/opt/cni/bin"}
        attachments = [{"containerID": cid, "ifname": "eth0"} for cid in valid]
        config = network_config(
            "1.1.0", meshwire_socket=self.socket, **{"cni.dev/valid-attachments": attachments}
        )
        return await run_shim("c", env, config)

    async def wait_status(
        self, url: str, pod: str, condition: Callable[[dict[str, Any]], bool], what: str
    ) -> dict[str, Any]:
        """Poll the pod's Topology status in the API (off the loop) until `condition`."""
        api = sync_api(url)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while True:
            status: dict[str, Any] = (await call(get, api, pod)).get("status") or {}
            if condition(status):
                return status
            if loop.time() > deadline:
                raise AssertionError(f"timed out after {WAIT}s waiting for {what}: {status}")
            await asyncio.sleep(POLL)

    async def wait(self, condition: Callable[[], bool], what: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while not condition():
            if loop.time() > deadline:
                raise AssertionError(f"timed out after {WAIT}s waiting for {what}")
            await asyncio.sleep(POLL)


def both_up(a: str, b: str) -> bool:
    """Whether eth1 exists and is up in both netns."""
    ends = [read_interfaces(ns).get("eth1") for ns in (a, b)]
    return all(end is not None and end.up for end in ends)


async def add_pair(node: DaemonNode, url: str) -> tuple[str, str]:
    """r1 and r2 linked by eth1, both ADDed; returns their netns paths."""
    api = sync_api(url)
    await call(create, api, topology("r1", "r2"))
    await call(create, api, topology("r2", "r1"))
    r1, r2 = node.pod_netns("r1"), node.pod_netns("r2")
    assert (await node.cni("ADD", "r1", "c1", r1)).exit == 0
    assert (await node.cni("ADD", "r2", "c2", r2)).exit == 0
    return r1, r2


def auth_overrides(tmp_path: Path) -> dict[str, str]:
    """Config keys naming fresh cluster credentials in `tmp_path/auth` (`meshwire certs init`)."""
    directory = tmp_path / "auth"
    certs.init_dir(directory, force=True)
    return {
        "auth.ca_cert": str(directory / certs.CA_CERT),
        "auth.ca_key": str(directory / certs.CA_KEY),
        "auth.wire_key": str(directory / certs.WIRE_KEY),
    }


@contextlib.asynccontextmanager
async def daemon_node(
    tmp_path: Path,
    before: Callable[[], object] = lambda: None,
    overrides: Mapping[str, str] | None = None,
) -> AsyncIterator[DaemonNode]:
    """A daemon on 127.0.0.1 of a private netns, its API not started (see `api_serving`).

    `overrides`: config keys ("peer.listen") over the harness's own; `before` runs
    in the netns before the daemon starts. Everything it creates (pod netns, the
    daemon, the API) is removed on exit.
    """
    with private_loopback():
        before()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        config = load_config(
            None,
            env={},
            overrides={
                "node_name": "node1",
                "node_ip": "127.0.0.1",
                "api.url": f"http://127.0.0.1:{port}",
                "cni.socket": str(tmp_path / "cni.sock"),
                "cni.state_dir": str(tmp_path / "sandboxes"),
                "cni.add_timeout": "10",
                "metrics.listen": "127.0.0.1:0",
                "reconcile.full_interval": "3600",
                **auth_overrides(tmp_path),
                **(overrides or {}),
            },
        )
        daemon = Daemon(config)
        task = asyncio.create_task(daemon.run())
        node = DaemonNode(
            daemon,
            config.cni.socket,
            port,
            str(tmp_path / "api.db"),
            f"mwt{secrets.token_hex(3)}-",
            [],
        )
        try:
            await node.wait(lambda: is_socket(config.cni.socket), "the CNI socket")
            yield node
        finally:
            daemon.stop()
            await asyncio.wait_for(task, WAIT)
            for name in node.created:
                netns.delete(name)


@contextlib.asynccontextmanager
async def api_serving(node: DaemonNode) -> AsyncIterator[str]:
    """The embedded API on the port the daemon was told; yields its URL."""
    async with serving(node.db, port=node.api_port) as server:
        yield server.url


def is_socket(path: str) -> bool:
    return Path(path).is_socket()
