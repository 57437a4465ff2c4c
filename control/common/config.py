"""The daemon's configuration: one model, one file, every default with its reason.

Precedence, lowest first: the defaults here, the YAML file (`--config`), the
`MESHWIRE_*` environment (`MESHWIRE_NODE_NAME`, `MESHWIRE_API__URL` for the
nested `api.url`), then `--set key=value` flags. An unknown key or a bad value
is rejected at start with a `ConfigError` naming the key, before anything is
touched.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from meshwire.base import defaults as dataplane_defaults
from meshwire.base import hostport

ENV_PREFIX = "MESHWIRE_"
ENV_NESTING = "__"


def default(section: type[BaseModel], key: str) -> Any:
    """The default of config key `key` in `section`: the one place a default is written.
    Modules that take the value as a parameter default to this."""
    return section.model_fields[key].default


class ConfigError(ValueError):
    """A config key is unknown or its value is invalid; the message names the key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _host_port(value: str) -> str:
    hostport.split(value)
    return value


class ApiConfig(_Section):
    url: str = Field(
        default="",
        description="API server URL: the embedded API (`meshwire api serve`) or any "
        "Kubernetes API server. Empty: use `api.kubeconfig`.",
    )
    kubeconfig: str = Field(
        default="",
        description="kubeconfig file used when `api.url` is empty. Empty too: the "
        "in-cluster service account, as in a DaemonSet.",
    )
    token_file: str = Field(
        default="",
        description="A file holding the bearer token sent with every request to `api.url` "
        "(a lab's embedded API asks for its token); read again when it changes. Empty: "
        "none sent.",
    )
    namespace: str = Field(
        default="",
        description="Watch Topology objects in this namespace only. Empty: all "
        "namespaces, as meshnet does.",
    )
    request_timeout: float = Field(
        default=30.0,
        gt=0,
        description="Client read timeout (s) for every API call, so a half-open "
        "connection cannot hang the informer.",
    )
    watch_timeout: int = Field(
        default=300,
        gt=0,
        description="Server-side watch timeout (s); the informer re-watches from "
        "the last resourceVersion when it ends.",
    )
    follow_nodes: bool = Field(
        default=False,
        description="Follow the cluster's Node objects: the links to a pod whose node was "
        "removed from the cluster (its Node deleted) lose carrier until the pod runs "
        "again; and write this daemon's `inter_node_link_type` on its own Node (the "
        "annotation meshwire.dev/inter-node-link-type), so each cross-node link is grpc "
        "only while both its nodes say grpc. Needs `list` and `watch` on nodes and "
        "`patch` on nodes/status (deploy/ turns it on and grants them); a lab's embedded "
        "API has no Nodes.",
    )


class CniConfig(_Section):
    socket: str = Field(
        default="/run/meshwire/cni.sock",
        description="Unix socket (0600, root) the CNI shim talks to.",
    )
    add_timeout: float = Field(
        default=30.0,
        gt=0,
        description="How long (s) a CNI ADD waits for the pod's local interfaces, and an "
        "ADD or DEL for the daemon's first sync, before it fails with 'try again later'; "
        "KNE's meshnet waits similarly. Also how long they wait for their status write: "
        "past it (the API is down) they succeed if cni.state_dir has recorded them.",
    )
    state_dir: str = Field(
        default="/run/meshwire/sandboxes",
        description="Where the daemon records each pod sandbox it added and has not "
        "deleted, so that after a restart it still writes back a placement the API lost "
        "meanwhile. Keep it on tmpfs: a reboot forgets the records with the sandboxes.",
    )
    conf_dir: str = Field(
        default="",
        description="The node's CNI config folder as this daemon sees it (deploy/ mounts "
        "the host's /etc/cni/net.d at /host/etc/cni/net.d). Used with "
        "cni.deployment_namespace; empty: the daemon never edits the CNI chain.",
    )
    deployment_namespace: str = Field(
        default="",
        description="The namespace meshwire is deployed in (deploy/ sets it from the "
        "pod's). Once it is being deleted (`kubectl delete -k deploy/`), the daemon "
        "changes no link any more (deleting the CRD deletes every Topology) and takes "
        "its shim out of the chain in cni.conf_dir: later pods are not handed to "
        "meshwire and existing links stay. It reconciles nothing before it has found "
        "the namespace there. A rollout or a restart leaves the namespace, and the "
        "chain, alone. Empty: never.",
    )


class PeerConfig(_Section):
    listen: str = Field(
        default=":51111",
        description="gRPC listen address of the peer service (wire handshakes); meshnet's "
        "port. HOST:PORT, an IPv6 host in brackets; no HOST, [::] or (gRPC's reading) "
        "0.0.0.0: every address, IPv4 and IPv6.",
    )
    rpc_timeout: float = Field(
        default=5.0, gt=0, description="Per-RPC timeout (s) of peer handshakes (KNE #743)."
    )

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        return _host_port(value)


class DataplaneConfig(_Section):
    port_base: int = Field(
        default=51112,
        ge=1,
        le=65000,
        description="Worker k serves the frame stream on port_base + k.",
    )
    offloads: bool = Field(
        default=True,
        description="Open TAPs with IFF_VNET_HDR and TSO/checksum offloads: one "
        "read carries up to 64 KiB of TCP instead of one MTU.",
    )
    batch_frames: int = Field(
        default=dataplane_defaults.BATCH_FRAMES,
        ge=1,
        le=1024,
        description="Frames per gRPC message at most; 1 is KNE's one-frame-per-message "
        "design. A batch leaves as soon as no TAP is readable, so this only caps a burst: "
        "256 carried 460-480k 64-byte frames/s at 2.2 us of worker CPU per frame, 64 "
        "400-480k at 2.2-2.5 us, 1 95-150k at 8-13 us (bench/wire_bench.py).",
    )
    run_dir: str = Field(
        default="",
        description="Directory where the workers wait for the next control process: with it "
        "they outlive the daemon (its crash, restart or upgrade), keep carrying their links, "
        "and are adopted by the next daemon, which rebuilds only what is missing or changed "
        "and stops workers of another config. Empty: the workers stop with the daemon, and "
        "grpc and emulated links stop while it restarts. A directory of this node only "
        "(deploy/ sets /run/meshwire/workers).",
    )
    worker_cgroup: str = Field(
        default="",
        description="With run_dir: the cgroup (under cgroup_root) each worker moves into, so "
        "that a runtime stopping the daemon's container, which kills its cgroup, leaves the "
        "workers running. Empty: they stay in the daemon's cgroup. On cgroup v1 they join it in "
        "every hierarchy; where they cannot, they log why and stay.",
    )
    cgroup_root: str = Field(
        default=dataplane_defaults.CGROUP_ROOT,
        description="Where the host's cgroup hierarchy is mounted (cgroup v2, or the folder of "
        "the v1 hierarchies), for worker_cgroup.",
    )
    orphan_grace: float = Field(
        default=dataplane_defaults.ORPHAN_GRACE,
        gt=0,
        description="With run_dir: a worker with no daemon for this many seconds exits once it "
        "holds no link; one holding links goes on carrying them until a daemon adopts it "
        "and tears them down.",
    )


class AuthConfig(_Section):
    enabled: bool = Field(
        default=True,
        description="Authenticate both ends of every node-to-node connection of the gRPC wire: "
        "the Peer service with mutual TLS (each node's certificate names its node_name and "
        "node_ip, issued at start from auth.ca_cert and auth.ca_key), the workers' streams "
        "with an HMAC challenge on auth.wire_key before any frame. Make the three files with "
        "`meshwire certs init DIR`. false: anyone who reaches the ports is trusted.",
    )
    ca_cert: str = Field(
        default="/etc/meshwire-auth/ca.crt",
        description="PEM bundle of the cluster CAs: a peer's certificate must chain to one. "
        "Several certificates: each is trusted (rotation).",
    )
    ca_key: str = Field(
        default="/etc/meshwire-auth/ca.key",
        description="PEM private key of a certificate in auth.ca_cert: this node issues its "
        "own certificate with it.",
    )
    wire_key: str = Field(
        default="/etc/meshwire-auth/wire.key",
        description="The cluster's wire keys, one hex key per line: streams are opened with "
        "the first, and any of them is accepted (rotation).",
    )
    wire_encrypt: bool = Field(
        default=True,
        description="After the preface every record of a stream is sealed with AES-256-GCM "
        "(integrity and replay protection, always on with auth). true: the streams this node "
        "opens are encrypted too; false: sealed in the clear. A node accepts both.",
    )
    wire_preface_timeout: float = Field(
        default=2.0,
        gt=0,
        description="Seconds a new stream connection has to finish the authenticated preface "
        "before it is closed: one round trip needs far less, a stalling peer is cut off.",
    )


class MetricsConfig(_Section):
    listen: str = Field(
        default=":51100",
        description="Serves /metrics (Prometheus), /healthz, /readyz and /links. HOST:PORT, an "
        "IPv6 host in brackets; no HOST: every address, IPv4 and IPv6 (kubelet probes "
        "the node's address, whichever family it is); 0.0.0.0: IPv4 only.",
    )

    token_file: str = Field(
        default="",
        description="A file holding the bearer token (`Authorization: Bearer ...`) that "
        "/links and /placement ask of a client not on loopback: they name the node's pods "
        "and namespaces. Empty: they answer loopback only. /metrics, /healthz and /readyz "
        "answer anyone.",
    )
    counters_interval: float = Field(
        default=1.0,
        ge=0,
        description="/links?counters=1 reads the kernel's counters (a link dump per pod "
        "netns) at most once in this many seconds; requests in between get the last read.",
    )

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        return _host_port(value)


class ReconcileConfig(_Section):
    debounce: float = Field(
        default=0.05,
        ge=0,
        description="Quiet (s) after each pass over a link, in which its further changes "
        "coalesce into one more pass; a first change never waits for it.",
    )
    full_interval: float = Field(
        default=60.0,
        gt=0,
        description="Every this many seconds each local link is re-verified against "
        "the kernel and repaired: the safety net for missed events.",
    )
    backoff_min: float = Field(
        default=0.1, gt=0, description="First retry delay (s) of a failed link."
    )
    backoff_max: float = Field(
        default=60.0, gt=0, description="Retry delays double up to this cap (s)."
    )
    status_rate: float = Field(
        default=50.0,
        gt=0,
        description="Topology status writes per second at most (coalesced per pod).",
    )


class VxlanConfig(_Section):
    port: int = Field(default=4789, ge=1, le=65535, description="VXLAN UDP port (IANA).")
    vni_base: int = Field(
        default=5000,
        ge=1,
        le=(1 << 24) - 1,
        description="Lowest VNI meshwire derives; meshnet's base, so its VNIs match.",
    )


class LogConfig(_Section):
    level: Literal["debug", "info", "warning", "error"] = Field(
        default=dataplane_defaults.LOG_LEVEL,
        description="Log level, of control and of its dataplane workers alike.",
    )
    format: Literal["json", "text"] = Field(
        default=dataplane_defaults.LOG_FORMAT,
        description="Structured JSON lines, or text for a terminal.",
    )


class Config(_Section):
    node_name: str = Field(
        default_factory=socket.gethostname,
        description="This node's name (default: the host name); the DaemonSet sets "
        "it from spec.nodeName.",
    )
    node_ip: str = Field(
        default="",
        description="This node's address: pods whose Topology status.src_ip equals "
        "it are local, and peers reach this node's links on it. Required.",
    )
    inter_node_link_type: Literal["vxlan", "grpc"] = Field(
        default="vxlan",
        description="How links between pods on different nodes are built: kernel "
        "VXLAN, or the userspace gRPC wire. With `api.follow_nodes`, a link is grpc only "
        "while both its nodes' daemons say grpc, vxlan otherwise: a rolling change of "
        "this key moves each link once, on both nodes at the same moment.",
    )
    mtu: int = Field(
        default=dataplane_defaults.MTU,
        ge=68,
        le=65535,
        description="MTU of every link meshwire creates (meshnet #54); 9000 for jumbo.",
    )
    workers: int = Field(
        default=0,
        ge=0,
        le=256,
        description=(
            "Dataplane worker processes for gRPC wires and emulated links "
            "(every node runs them); 0: one per core."
        ),
    )
    reserve_ports: bool = Field(
        default=True,
        description="Add the ports this daemon listens on (metrics, and with grpc the peer and "
        "worker ports) to net.ipv4.ip_local_reserved_ports at start, so no outgoing "
        "connection on the node draws one as its source port. Only adds, never removes; "
        "false leaves the sysctl alone (a taken port is then waited for).",
    )
    api: ApiConfig = ApiConfig()
    cni: CniConfig = CniConfig()
    peer: PeerConfig = PeerConfig()
    dataplane: DataplaneConfig = DataplaneConfig()
    auth: AuthConfig = AuthConfig()
    metrics: MetricsConfig = MetricsConfig()
    reconcile: ReconcileConfig = ReconcileConfig()
    vxlan: VxlanConfig = VxlanConfig()
    log: LogConfig = LogConfig()

    @field_validator("node_name")
    @classmethod
    def _node_name(cls, value: str) -> str:
        return value or socket.gethostname()

    @field_validator("node_ip")
    @classmethod
    def _node_ip(cls, value: str) -> str:
        if value:
            try:
                ipaddress.ip_address(value)
            except ValueError:
                raise ValueError(f"node_ip must be an IP address, got {value!r}") from None
        return value

    @property
    def worker_count(self) -> int:
        return self.workers or (os.cpu_count() or 1)


def load_config(
    path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> Config:
    """Build the config from the file, the environment and `key=value` overrides.

    Raises ConfigError naming the key for an unknown key, a bad value, a file
    that is not a YAML mapping, or a missing file.
    """
    data: dict[str, Any] = {}
    if path:
        data = _read_file(Path(path))
    # Dotted key -> where its value came from, when not from the file: an
    # error must send the reader to the variable or flag, not to the file.
    origins: dict[str, str] = {}
    for key, (name, value) in _from_env(os.environ if env is None else env).items():
        _set_dotted(data, key, value)
        origins[key] = f"environment {name}"
    for key, value in (overrides or {}).items():
        _set_dotted(data, key, value)
        origins[key] = "command line"
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, path, origins)) from None
    if not config.node_ip:
        raise ConfigError("node_ip: required (this node's address, e.g. 10.0.0.5)")
    return config


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    """`["api.url=http://x", ...]` -> `{"api.url": "http://x"}`; names a malformed pair."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {pair!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping of keys")
    return data


def _from_env(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Dotted key -> (variable name, value) for every `MESHWIRE_*` variable."""
    out: dict[str, tuple[str, str]] = {}
    for name, value in env.items():
        if name.startswith(ENV_PREFIX):
            key = name[len(ENV_PREFIX) :].lower().replace(ENV_NESTING, ".")
            out[key] = (name, value)
    return out


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{dotted}: {part} is not a section")
        node = child
    node[parts[-1]] = value


def _describe(exc: ValidationError, path: str | Path | None, origins: Mapping[str, str]) -> str:
    default_where = f"config file {path}" if path else "config"
    lines = []
    for error in exc.errors():
        key = ".".join(str(p) for p in error["loc"]) or "(top level)"
        where = origins.get(key, default_where)
        if error["type"] == "extra_forbidden":
            lines.append(f"{where}: {key}: unknown key")
        else:
            if error["type"] == "value_error":
                lines.append(f"{where}: {key}: {error['msg'].removeprefix('Value error, ')}")
            else:
                lines.append(f"{where}: {key}: {error['msg']} (got {error.get('input')!r})")
    return "; ".join(lines)


def defaults_yaml() -> str:
    """The full config file with every key, its default and its meaning, as comments."""
    lines = [
        "# meshwire daemon configuration. Every key with its default.",
        "# Override any key with MESHWIRE_<KEY> (nested: MESHWIRE_API__URL) or --set key=value.",
    ]
    _emit(Config.model_fields, Config(node_ip="192.0.2.1"), lines, indent="")
    return "\n".join(lines) + "\n"


def _emit(fields: Mapping[str, Any], instance: BaseModel, lines: list[str], indent: str) -> None:
    for name, info in fields.items():
        value = getattr(instance, name)
        if isinstance(value, BaseModel):
            lines.append("")
            lines.append(f"{indent}{name}:")
            _emit(type(value).model_fields, value, lines, indent + "  ")
            continue
        if name in ("node_name", "node_ip"):
            value = ""  # machine-specific: printed empty, not this machine's value
        if info.description:
            lines.append(f"{indent}# {info.description}")
        lines.append(f"{indent}{name}: {json.dumps(value)}")
