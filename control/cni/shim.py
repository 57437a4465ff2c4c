"""The Python twin of the C shim (`cext/cni_shim.c`): same contract, used by tests.

Run as `python -m meshwire.control.cni.shim` with the CNI environment and the
network config on stdin. VERSION is answered locally; every other command is
forwarded to the daemon (socket chosen as `frame.py` says) and the daemon's
stdout and exit code are reproduced. An unreachable daemon is a CNI error
with code 11 on stdout and exit 1. The C shim behaves identically; its
frames are byte-identical to this one's.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping

from meshwire.control.cni.frame import (
    MAX_FRAME_BYTES,
    MAX_SOCKET_PATH_BYTES,
    encode_request,
    error_version,
    shim_outcome,
    socket_path,
    stdin_unreadable,
    unreachable,
)
from meshwire.control.cni.protocol import Response, version_result


def run(env: Mapping[str, str], stdin: bytes) -> Response:
    """One invocation: what to print and the exit code."""
    if env.get("CNI_COMMAND") == "VERSION":
        return Response(exit=0, stdout=version_result())
    path = socket_path(env, stdin)
    version = error_version(stdin)
    if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES:
        return unreachable(path, f"socket path longer than {MAX_SOCKET_PATH_BYTES} bytes", version)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        try:
            conn.connect(path)
        except OSError as exc:
            return unreachable(path, exc.strerror or str(exc), version)
        try:
            conn.sendall(encode_request(env, stdin))
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            # The daemon may have answered (and closed) before reading it all.
            pass
        return shim_outcome(_read_all(conn), path, version)


def _read_all(conn: socket.socket) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size <= MAX_FRAME_BYTES:
        try:
            chunk = conn.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def main() -> int:
    try:
        stdin = sys.stdin.buffer.read()
    except OSError as exc:
        response = stdin_unreadable(exc.strerror or str(exc))
    else:
        response = run(os.environ, stdin)
    sys.stdout.buffer.write(response.stdout.encode("utf-8", "surrogatepass"))
    sys.stdout.buffer.flush()
    return response.exit


if __name__ == "__main__":
    sys.exit(main())
