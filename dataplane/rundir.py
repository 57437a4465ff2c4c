"""The workers' run directory: where a worker that outlives its control process is found.

With `dataplane.run_dir` set, worker k listens on `<run_dir>/worker-<k>.sock`
(SOCK_SEQPACKET) for the next control process. What this module promises:

- Any directory works, however deep: every bind and connect goes through
  `/proc/self/fd/<dir fd>/<name>`, a short path to the same socket (an AF_UNIX
  path holds 107 bytes at most).
- A worker is named by its pid *and* its start time (`/proc/<pid>/stat` field
  22): the pid is read from the socket's peer credentials (SO_PEERCRED), never
  from a file, and a pid that now belongs to another process is never signalled.
- `stop` sends SIGTERM, then SIGKILL after its grace; stopping a process that is
  gone is success.
- A socket with no listener behind it (its worker died) is stale: `connect`
  removes it and reports None.
- Whoever holds a worker's socket can hand it TAPs and take its wires: the
  directory is made this user's only, and a worker answers a process of its own
  user only (`peer_uid`).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

SOCKET_PATTERN = re.compile(r"worker-(\d+)\.sock")
POLL = 0.02


def socket_name(index: int) -> str:
    return f"worker-{index}.sock"


@contextlib.contextmanager
def short_path(directory: str, name: str) -> Iterator[str]:
    """A path to `directory/name` short enough for AF_UNIX, valid inside the block."""
    fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{name}"
    finally:
        os.close(fd)


def listen(directory: str, index: int) -> socket.socket:
    """A listening socket for worker `index`, replacing whatever file had its name."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    name = socket_name(index)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    try:
        with short_path(directory, name) as path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            sock.bind(path)
        sock.listen(4)
    except BaseException:
        sock.close()
        raise
    return sock


def connect(directory: str, index: int) -> socket.socket | None:
    """A connection to worker `index`'s socket; None if there is none (a stale socket
    file is removed). Raises OSError for anything else (the directory unreadable)."""
    name = socket_name(index)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    try:
        with short_path(directory, name) as path:
            try:
                sock.connect(path)
            except FileNotFoundError:
                sock.close()
                return None
            except ConnectionRefusedError:
                sock.close()
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                return None
    except FileNotFoundError:  # no directory yet
        sock.close()
        return None
    except BaseException:
        sock.close()
        raise
    return sock


def indexes(directory: str) -> list[int]:
    """The worker indexes that have a socket file in `directory` (none if it is missing)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := SOCKET_PATTERN.fullmatch(n)))


def peer_pid(sock: socket.socket) -> int:
    """The pid of the process at the other end of a connected Unix socket."""
    return _peer(sock)[0]


def peer_uid(sock: socket.socket) -> int:
    """The user id of the process at the other end of a connected Unix socket."""
    return _peer(sock)[1]


def _peer(sock: socket.socket) -> tuple[int, int]:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    return int.from_bytes(creds[:4], "little"), int.from_bytes(creds[4:8], "little")


def start_time(pid: int) -> int | None:
    """The start time (clock ticks since boot) of `pid`; None if it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


def stop(pid: int, started: int, grace: float = 5.0) -> None:
    """SIGTERM the process (pid, start time), SIGKILL it after `grace`; waits until gone."""
    if start_time(pid) != started:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while start_time(pid) == started:
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _reap(pid)
        time.sleep(POLL)
    _reap(pid)


def stop_all(directory: str, grace: float = 5.0) -> list[int]:
    """Stop every worker listening in `directory` and remove the sockets; their pids."""
    stopped = []
    for index in indexes(directory):
        sock = connect(directory, index)
        if sock is None:
            continue
        with sock:
            pid = peer_pid(sock)
        started = start_time(pid)
        if started is not None:
            stop(pid, started, grace)
            stopped.append(pid)
        with short_path(directory, socket_name(index)) as path, contextlib.suppress(OSError):
            os.unlink(path)
    return stopped


def _reap(pid: int) -> None:
    # Only a worker's parent can reap it; for anyone else the zombie is init's.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def remove(directory: str, index: int) -> None:
    """Remove worker `index`'s socket file; one that is not there is success."""
    with contextlib.suppress(FileNotFoundError), short_path(directory, socket_name(index)) as path:
        os.unlink(path)
