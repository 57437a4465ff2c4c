"""`python -m meshwire.tools.lab.forkserver MODULE...`: fork the lab's daemons from one import.

`lab up` starts a daemon per node at once, and each daemon's interpreter spends
most of its start importing the same modules. The fork server imports MODULEs
once, while `up` still reads its lab file, then forks one process per request,
each a daemon in its own namespace. Nothing else changes: the process runs
the same `python -m` entry point with the same arguments, leads its own
session (so `processes.stop` stops its group), writes to its own log and keeps
its PID for its whole life, as one started through `nsexec.py` does.

Requests come on stdin and answers go to stdout, one JSON object per line:

    {"netns": NAME-OR-PATH, "argv": [...], "log": PATH}  ->  {"pid": N} | {"error": TEXT}

An argv `[sys.executable, "-m", MODULE, ARGS...]` runs in the forked child
(`runpy`, as `python -m` does); any other argv is exec'd there. The server forks
only while it is single-threaded (grpc must never fork with threads live); if
an import started a thread, every request is exec'd instead. It exits at the
end of stdin. A child's own failure (a missing netns, a module that cannot
start) goes to its log, with exit status 127 as `nsexec` gives.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import runpy
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import IO, Any

from meshwire.dataplane.rundir import start_time
from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.nsexec import NOT_STARTED, argv_for, enter, execute
from meshwire.tools.lab.state import ProcessRecord

WHO = "forkserver"  # names the fork server in a child's log


def main(modules: list[str]) -> int:
    # grpc registers fork handlers at import unless told not to; the children fork nothing.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:  # the child fails at the same import, in its own log
            print(f"forkserver: import {module}: {exc}", file=sys.stderr)
    # The imported objects live as long as the children: out of the collector's sight,
    # a child's first full collection does not walk (and copy, page by page) all of them.
    gc.freeze()
    can_fork = threading.active_count() == 1 and _threads() == 1
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    for line in sys.stdin:
        try:
            request = _request(line)
        except ValueError as exc:
            answers.write(json.dumps({"error": str(exc)}) + "\n")
            continue
        answers.write(json.dumps({"pid": _launch(request, can_fork)}) + "\n")
        _reap()
    return 0


def _request(line: str) -> dict[str, Any]:
    request = json.loads(line)
    if not isinstance(request, dict):
        raise ValueError("a request is a JSON object")
    argv = request.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError("argv: a non-empty list of strings")
    for key in ("netns", "log"):
        if not isinstance(request.get(key), str) or not request[key]:
            raise ValueError(f"{key}: a non-empty string")
    return request


def _launch(request: dict[str, Any], can_fork: bool) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = NOT_STARTED
    try:
        code = _child(request["netns"], request["argv"], request["log"], can_fork)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _child(netns: str, argv: list[str], log: str, can_fork: bool) -> int:
    os.setsid()
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the child's own fd 0, for its life
    if not enter(netns, WHO):
        return NOT_STARTED
    module = _module_of(argv)
    if module is None or not can_fork:
        return execute(argv, WHO)
    sys.argv = [module, *argv[3:]]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return _exit_code(exc.code)
    return 0


def _module_of(argv: list[str]) -> str | None:
    """MODULE of `[sys.executable, "-m", MODULE, ...]`, the form this interpreter can run."""
    if len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m":
        return argv[2]
    return None


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _reap() -> None:
    # A child that already ended (a bad netns) is reaped here; the rest outlive the server.
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


class ForkServer:
    """The `lab up` side: start the server, then `start` processes through it."""

    def __init__(self, modules: list[str]) -> None:
        argv = [sys.executable, "-m", "meshwire.tools.lab.forkserver", *modules]
        try:
            # Its own complaints (a module it could not import) reach the user's terminal.
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            raise LabError(f"fork server: {exc}") from None
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._requests: IO[str] = self._proc.stdin
        self._answers: IO[str] = self._proc.stdout

    def start(self, role: str, netns: str, argv: list[str], log: Path) -> ProcessRecord:
        """Start `argv` inside `netns` with stdout and stderr appended to `log`; the record
        names the same argv and log as one started through `nsexec` would."""
        log.parent.mkdir(parents=True, exist_ok=True)
        request = {"netns": netns, "argv": argv, "log": str(log)}
        try:
            self._requests.write(json.dumps(request) + "\n")
            self._requests.flush()
            answer = json.loads(self._answers.readline() or "null")
        except (OSError, ValueError) as exc:
            raise LabError(f"{role}: the fork server failed: {exc}") from None
        if not isinstance(answer, dict) or "pid" not in answer:
            problem = answer.get("error") if isinstance(answer, dict) else "it exited"
            raise LabError(f"{role}: the fork server refused to start it: {problem}")
        pid = int(answer["pid"])
        return ProcessRecord(role, pid, start_time(pid) or 0, argv_for(netns, argv), str(log))

    def close(self) -> int:
        """End the server (its children run on); waits for it to exit and returns its
        exit status (negative: killed, after 5 s without ending at the end of its input)."""
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        return self._proc.returncode

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
