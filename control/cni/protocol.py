"""The CNI spec (1.0/1.1) as meshwire speaks it: pure, no I/O (the h11 model).

`parse_request` turns a shim's environment and network config into a typed
`CniRequest`, or raises `CniError` with the spec's code and a message naming
the CNI variable or config field; the renderers produce what the plugin
prints. `frame.py` carries both between the shim and the daemon.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any

from meshwire.control.model.name_rules import interface_name_problem

SUPPORTED_VERSIONS = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
LATEST_VERSION = SUPPORTED_VERSIONS[-1]

_CONTAINER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")
_VALID_ATTACHMENT_FIELDS = ("cni.dev/valid-attachments", "cni.dev/attachments")


class ErrorCode(IntEnum):
    """The spec's well-known codes (1.0, plus 50/51 from 1.1 STATUS); 100+ are ours."""

    INCOMPATIBLE_VERSION = 1
    UNSUPPORTED_FIELD = 2
    UNKNOWN_CONTAINER = 3
    INVALID_ENV = 4
    IO_FAILURE = 5
    DECODE_FAILURE = 6
    INVALID_CONFIG = 7
    TRY_AGAIN_LATER = 11
    PLUGIN_NOT_AVAILABLE = 50
    LIMITED_CONNECTIVITY = 51
    INTERNAL = 100


class CniError(Exception):
    """A failure the plugin reports as a CNI error result (non-zero exit)."""

    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code = int(code)
        self.msg = msg
        self.details = details


class Command(StrEnum):
    ADD = "ADD"
    DEL = "DEL"
    CHECK = "CHECK"
    VERSION = "VERSION"
    STATUS = "STATUS"
    GC = "GC"


# The variables each command cannot run without (spec 1.1, section 2). GC's
# CNI_PATH is not enforced: meshwire never execs a delegate.
_REQUIRED_ENV: dict[Command, tuple[str, ...]] = {
    Command.ADD: ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"),
    Command.DEL: ("CNI_CONTAINERID", "CNI_IFNAME"),
    Command.CHECK: ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"),
    Command.VERSION: (),
    Command.STATUS: (),
    Command.GC: (),
}
# The first spec version that defines each command.
_SINCE: dict[Command, str] = {Command.CHECK: "0.4.0", Command.STATUS: "1.1.0", Command.GC: "1.1.0"}


@dataclass(frozen=True, slots=True)
class PodRef:
    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Attachment:
    container_id: str
    ifname: str


@dataclass(frozen=True, slots=True)
class CniRequest:
    """One validated CNI invocation.

    Fields a command does not take are empty: `container_id`/`ifname` for
    STATUS and GC, `netns` for a DEL whose netns is gone. `pod` is None when
    CNI_ARGS names no pod (a runtime outside Kubernetes). `valid_attachments`
    is only filled for GC.
    """

    command: Command
    cni_version: str
    network: str
    container_id: str = ""
    netns: str = ""
    ifname: str = ""
    pod: PodRef | None = None
    cni_path: tuple[str, ...] = ()
    config: Mapping[str, Any] | None = None
    prev_result: Mapping[str, Any] | None = None
    valid_attachments: tuple[Attachment, ...] = ()


@dataclass(frozen=True, slots=True)
class Response:
    """What the shim does: print `stdout` exactly, exit with `exit`."""

    exit: int
    stdout: str


# --- CNI requests -------------------------------------------------------------


def parse_request(env: Mapping[str, str], stdin: str) -> CniRequest:
    """Validates one invocation; raises CniError naming the variable or field.

    Order as in the reference skeleton: the command (4), the variables it
    requires (4), then the config: not JSON (6), not an object or a field of
    the wrong type (7), a cniVersion this plugin or this command does not
    support (1). VERSION reads nothing but CNI_COMMAND.
    """
    command = _command(env.get("CNI_COMMAND", ""))
    if command is Command.VERSION:
        return CniRequest(command=command, cni_version=LATEST_VERSION, network="")
    for name in _REQUIRED_ENV[command]:
        if not env.get(name):
            raise CniError(ErrorCode.INVALID_ENV, f"{name} is missing; CNI {command} requires it")
    container_id = env.get("CNI_CONTAINERID", "")
    if container_id and not _CONTAINER_ID.fullmatch(container_id):
        raise CniError(
            ErrorCode.INVALID_ENV,
            f"CNI_CONTAINERID {container_id!r} is not a container id",
            "it must start with a letter or digit, then letters, digits, '_', '.' or '-'",
        )
    ifname = env.get("CNI_IFNAME", "")
    if ifname:
        _check_ifname(ifname)
    pod = _pod(env.get("CNI_ARGS", ""))
    config = _config(stdin)
    version = _version(config, command)
    network = config.get("name")
    if not isinstance(network, str) or not network:
        problem = "is missing" if network is None else "must be a non-empty string"
        raise _config_error("name", problem)
    prev_result = config.get("prevResult")
    if prev_result is not None and not isinstance(prev_result, dict):
        raise _config_error("prevResult", "must be an object (the previous plugin's result)")
    if command is Command.CHECK and prev_result is None:
        raise _config_error("prevResult", "is missing; CNI CHECK requires it")
    return CniRequest(
        command=command,
        cni_version=version,
        network=network,
        container_id=container_id,
        netns=env.get("CNI_NETNS", ""),
        ifname=ifname,
        pod=pod,
        cni_path=tuple(p for p in env.get("CNI_PATH", "").split(":") if p),
        config=config,
        prev_result=prev_result,
        valid_attachments=_valid_attachments(config) if command is Command.GC else (),
    )


def _command(text: str) -> Command:
    if not text:
        raise CniError(ErrorCode.INVALID_ENV, "CNI_COMMAND is missing")
    try:
        return Command(text)
    except ValueError:
        raise CniError(
            ErrorCode.INVALID_ENV,
            f"CNI_COMMAND {text!r} is not a CNI command",
            "supported: " + ", ".join(c.value for c in Command),
        ) from None


def _check_ifname(ifname: str) -> None:
    problem = interface_name_problem(ifname)
    if problem:
        raise CniError(ErrorCode.INVALID_ENV, f"CNI_IFNAME: {problem}")


def _pod(cni_args: str) -> PodRef | None:
    """K8S_POD_NAMESPACE/K8S_POD_NAME from CNI_ARGS (`K=V;K=V`); other keys are ignored."""
    pairs: dict[str, str] = {}
    for item in cni_args.split(";"):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CniError(
                ErrorCode.INVALID_ENV, f"CNI_ARGS item {item!r} is not KEY=VALUE", cni_args
            )
        pairs[key] = value
    name, namespace = pairs.get("K8S_POD_NAME", ""), pairs.get("K8S_POD_NAMESPACE", "")
    if not name and not namespace:
        return None
    if not name or not namespace:
        missing = "K8S_POD_NAME" if not name else "K8S_POD_NAMESPACE"
        raise CniError(ErrorCode.INVALID_ENV, f"CNI_ARGS has no {missing}", cni_args)
    return PodRef(namespace=namespace, name=name)


def _config(stdin: str) -> dict[str, Any]:
    if not stdin.strip():
        raise _decode_error("network config on stdin is empty")
    try:
        config = loads_json(stdin)
    except (ValueError, RecursionError) as exc:
        raise _decode_error("network config on stdin is not JSON", str(exc)) from None
    if not isinstance(config, dict):
        raise CniError(ErrorCode.INVALID_CONFIG, "network config on stdin is not a JSON object")
    return config


def _version(config: Mapping[str, Any], command: Command) -> str:
    version = config.get("cniVersion")
    if not isinstance(version, str):
        raise _config_error("cniVersion", "is missing" if version is None else "must be a string")
    supported = ", ".join(SUPPORTED_VERSIONS)
    if version not in SUPPORTED_VERSIONS:
        raise CniError(
            ErrorCode.INCOMPATIBLE_VERSION,
            f"incompatible CNI version {version!r} (network config field cniVersion)",
            f"supported: {supported}",
        )
    since = _SINCE.get(command)
    if since and SUPPORTED_VERSIONS.index(version) < SUPPORTED_VERSIONS.index(since):
        raise CniError(
            ErrorCode.INCOMPATIBLE_VERSION,
            f"CNI {command} needs cniVersion {since} or later, the network config has {version}",
        )
    return version


def loads_json(text: str) -> Any:
    """`text` parsed as RFC 8259 JSON, which the CNI spec's configs are: as
    json.loads, but NaN, Infinity and -Infinity are not JSON (ValueError)."""
    return json.loads(text, parse_constant=_not_json)


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _valid_attachments(config: Mapping[str, Any]) -> tuple[Attachment, ...]:
    for field in _VALID_ATTACHMENT_FIELDS:
        items = config.get(field)
        if items is None:
            continue
        if not isinstance(items, list):
            raise _config_error(field, "must be a list")
        out = []
        for item in items:
            cid = item.get("containerID") if isinstance(item, dict) else None
            ifname = item.get("ifname") if isinstance(item, dict) else None
            if not isinstance(cid, str) or not isinstance(ifname, str):
                raise _config_error(field, f"item {item!r} needs string containerID and ifname")
            out.append(Attachment(container_id=cid, ifname=ifname))
        return tuple(out)
    return ()


def _decode_error(msg: str, details: str = "") -> CniError:
    return CniError(ErrorCode.DECODE_FAILURE, msg, details)


def _config_error(field: str, problem: str) -> CniError:
    return CniError(ErrorCode.INVALID_CONFIG, f"network config field {field} {problem}")


# --- results ------------------------------------------------------------------


def render(result: Mapping[str, Any]) -> str:
    """Result text as printed: ASCII JSON and a newline, like the reference skeleton."""
    return json.dumps(result) + "\n"


def version_result() -> str:
    return render({"cniVersion": LATEST_VERSION, "supportedVersions": list(SUPPORTED_VERSIONS)})


def error_response(error: CniError, cni_version: str) -> Response:
    result: dict[str, Any] = {"cniVersion": cni_version, "code": error.code, "msg": error.msg}
    if error.details:
        result["details"] = error.details
    return Response(exit=1, stdout=render(result))


def success_response(request: CniRequest) -> Response:
    """ADD prints prevResult unchanged (or an empty result of the config's version);
    VERSION prints the supported versions; every other command prints nothing."""
    if request.command is Command.ADD:
        if request.prev_result is not None:
            return Response(exit=0, stdout=render(request.prev_result))
        empty = {"cniVersion": request.cni_version, "interfaces": [], "ips": [], "dns": {}}
        return Response(exit=0, stdout=render(empty))
    if request.command is Command.VERSION:
        return Response(exit=0, stdout=version_result())
    return Response(exit=0, stdout="")
