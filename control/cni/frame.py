"""The frame between a CNI shim and the daemon, and the shim's local decisions: pure.

One request and one response per connection, each a single line of compact
JSON ended by `\\n` (JSON never contains a raw newline, so a line is a frame):

    request   {"v":1,"env":{<CNI_* variables, sorted by name>},"stdin":"<config>"}
    response  {"exit":N,"stdout":"<text to print>"}

The C shim (`cext/cni_shim.c`) writes requests byte-identical to
`encode_request` and reads responses as `shim_outcome` does; the Python twin
(`shim.py`) calls these functions. The request carries stdin as a string, not
parsed, so the daemon can answer a config that is not JSON with code 6.

Socket selection (both shims): env `MESHWIRE_CNI_SOCKET` if set and non-empty,
else the network config's top-level string field `meshwire_socket` (written by
`meshwire cni install` from the daemon's `cni.socket`), else `DEFAULT_SOCKET`.
The environment wins so an operator can point one invocation elsewhere by hand.

Both shims read the config and the answer as JSON only if they are JSON by
RFC 8259 (`shim_json`): UTF-8, no NaN, nested at most `MAX_SHIM_DEPTH` deep
(the C scanner's bound). A config that is not has no fields for the shim, which
forwards it all the same (the daemon answers code 6). A `meshwire_socket` or
`cniVersion` holding NUL or a lone surrogate (`"\\ud800"`) is absent: no path
or version has one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from meshwire.control.cni.protocol import (
    LATEST_VERSION,
    SUPPORTED_VERSIONS,
    CniError,
    ErrorCode,
    Response,
    error_response,
    loads_json,
)

DEFAULT_SOCKET = "/run/meshwire/cni.sock"
SOCKET_ENV = "MESHWIRE_CNI_SOCKET"
SOCKET_FIELD = "meshwire_socket"
FRAME_VERSION = 1
# A chained config with a large prevResult is tens of KiB; JSON escaping can
# grow it sixfold. Anything past this is not a CNI request.
MAX_FRAME_BYTES = 8 << 20
# sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
MAX_SOCKET_PATH_BYTES = 107
# The C shim's scanner recurses once per level: deeper documents are malformed for
# both shims, whatever depth this interpreter's parser would reach.
MAX_SHIM_DEPTH = 512


@dataclass(frozen=True, slots=True)
class ShimRequest:
    """What a shim forwards: its CNI_* variables and its stdin, not parsed as JSON."""

    env: Mapping[str, str]
    stdin: str


def encode_request(env: Mapping[str, str], stdin: bytes) -> bytes:
    """The request frame for a shim's environment (only CNI_* is kept) and stdin.

    Bytes that are not UTF-8 pass through unchanged (surrogateescape), exactly
    as the C shim copies them; the daemon rejects them with code 6. Names sort
    by their bytes, as the C shim sorts them: a name that is not UTF-8 sorts
    elsewhere by code point.
    """
    cni_env = {name: env[name] for name in sorted(env, key=_os_bytes) if name.startswith("CNI_")}
    body = {"v": FRAME_VERSION, "env": cni_env, "stdin": stdin.decode("utf-8", "surrogateescape")}
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return _os_bytes(text) + b"\n"


def decode_request(frame: bytes) -> ShimRequest:
    """Reads a request frame; raises CniError(6) naming what is malformed."""
    try:
        text = frame.removesuffix(b"\n").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _malformed(
            "is not UTF-8 (the network config on stdin or a CNI_* variable)", str(exc)
        ) from None
    try:
        body = loads_json(text)
    except (ValueError, RecursionError) as exc:
        raise _malformed("is not JSON", str(exc)) from None
    if not isinstance(body, dict) or body.get("v") != FRAME_VERSION:
        version = body.get("v") if isinstance(body, dict) else None
        raise _malformed(f"has frame version {version!r}, want {FRAME_VERSION}")
    env, stdin = body.get("env"), body.get("stdin")
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise _malformed("has no 'env' object of strings")
    if not isinstance(stdin, str):
        raise _malformed("has no 'stdin' string")
    return ShimRequest(env=env, stdin=stdin)


def encode_response(response: Response) -> bytes:
    """The response frame: ASCII-only JSON, so any stdout text survives the trip."""
    body = {"exit": response.exit, "stdout": response.stdout}
    return json.dumps(body, separators=(",", ":")).encode("ascii") + b"\n"


def shim_outcome(frame: bytes, socket: str, cni_version: str) -> Response:
    """What a shim does with `frame`, everything it read from the daemon until EOF.

    No complete frame (the daemon closed or died first) is code 11, try again
    later; a frame that is not `{"exit": 0..255, "stdout": str}` is code 5.
    Both messages name the socket.
    """
    if not frame.endswith(b"\n"):
        error = CniError(
            ErrorCode.TRY_AGAIN_LATER,
            "meshwire daemon closed the connection without answering",
            f"socket {socket}",
        )
        return error_response(error, cni_version)
    body = shim_json(frame)
    if isinstance(body, dict):
        code, stdout = body.get("exit"), body.get("stdout")
        if type(code) is int and 0 <= code <= 255 and isinstance(stdout, str):
            return Response(exit=code, stdout=stdout)
    error = CniError(
        ErrorCode.IO_FAILURE, "malformed answer from the meshwire daemon", f"socket {socket}"
    )
    return error_response(error, cni_version)


def unreachable(socket: str, reason: str, cni_version: str) -> Response:
    """The shim's answer when it cannot connect: code 11, so the runtime retries."""
    error = CniError(
        ErrorCode.TRY_AGAIN_LATER, "meshwire daemon unreachable", f"{socket}: {reason}"
    )
    return error_response(error, cni_version)


def stdin_unreadable(reason: str) -> Response:
    """The shim's answer when stdin cannot be read: code 5."""
    error = CniError(
        ErrorCode.IO_FAILURE, "cannot read the network config from stdin", f"stdin: {reason}"
    )
    return error_response(error, LATEST_VERSION)


def socket_path(env: Mapping[str, str], stdin: bytes) -> str:
    """The daemon socket for this invocation (precedence in the module docstring)."""
    from_env = env.get(SOCKET_ENV, "")
    if from_env:
        return from_env
    return _top_level_string(stdin, SOCKET_FIELD) or DEFAULT_SOCKET


def error_version(stdin: bytes | str) -> str:
    """The cniVersion of an error result: the config's if supported, else the latest."""
    version = _top_level_string(stdin, "cniVersion")
    return version if version in SUPPORTED_VERSIONS else LATEST_VERSION


def shim_json(document: bytes | str) -> Any:
    """`document` parsed as a shim parses it (module docstring), or None if it is not JSON."""
    try:
        text = document.decode("utf-8") if isinstance(document, bytes) else document
        value = loads_json(text)
    except (ValueError, RecursionError):
        return None
    return value if _depth_within(value, MAX_SHIM_DEPTH) else None


def _depth_within(document: Any, limit: int) -> bool:
    """Whether no value of `document` sits in more than `limit` arrays and objects."""
    stack = [(document, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return False
        if isinstance(value, dict):
            stack.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)
    return True


def _top_level_string(stdin: bytes | str, key: str) -> str:
    config = shim_json(stdin)
    value = config.get(key) if isinstance(config, dict) else None
    if not isinstance(value, str) or "\x00" in value:
        return ""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, escaped
        return ""
    return value


def _os_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _malformed(problem: str, details: str = "") -> CniError:
    return CniError(ErrorCode.DECODE_FAILURE, f"request from the CNI shim {problem}", details)
