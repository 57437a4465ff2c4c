"""Starting and stopping the lab's processes, by PID only.

Each process starts in a new session, so it leads a process group whose id is
its PID: stopping the group also stops whatever it forked (a daemon's
dataplane workers). A record keeps the PID *and* its start time
(/proc/<pid>/stat field 22): a PID that now belongs to another process is left
alone. Processes outlive the `meshwire lab` command that started them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from meshwire.dataplane.rundir import start_time
from meshwire.tools.lab.state import ProcessRecord

STOP_GRACE = 5.0  # seconds between SIGTERM and SIGKILL: a daemon's clean shutdown is quick
POLL = 0.05


def pids_whose_argv(predicate: Callable[[list[bytes]], bool]) -> list[int]:
    """The pids of the running processes whose argv (`/proc/<pid>/cmdline`, split at
    NUL) satisfies `predicate`, in order."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if predicate(argv):
            found.append(int(entry.name))
    return sorted(found)


def is_running(record: ProcessRecord) -> bool:
    return start_time(record.pid) == record.start_time


def start(
    role: str,
    argv: list[str],
    log: Path,
    env: dict[str, str] | None = None,
    pass_fds: tuple[int, ...] = (),
) -> ProcessRecord:
    """Spawn `argv` in its own session with stdout and stderr appended to `log`; `env`
    None: this process's environment; `pass_fds` stay open in the child."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            env=env,
            pass_fds=pass_fds,
        )
    started = start_time(proc.pid)
    # A process that died at once is recorded with start time 0: nothing to stop,
    # and `is_running` reports it dead.
    return ProcessRecord(role, proc.pid, started or 0, argv, str(log))


def stop(record: ProcessRecord, sig: signal.Signals = signal.SIGTERM) -> None:
    """Stop the record's process group; stopping a process that is gone is success.

    SIGTERM first, SIGKILL for whatever of the group is left after STOP_GRACE.
    If the PID now belongs to another process, that process is not ours and our
    group is empty (the kernel does not reuse a PID still used as a group id).
    """
    current = start_time(record.pid)
    if current is not None and current != record.start_time:
        return
    _signal_group(record.pid, sig)
    deadline = time.monotonic() + STOP_GRACE
    while _group_alive(record.pid) and time.monotonic() < deadline:
        _reap(record.pid)
        time.sleep(POLL)
    _signal_group(record.pid, signal.SIGKILL)
    while _group_alive(record.pid):
        _reap(record.pid)
        time.sleep(POLL)


def signal_group(record: ProcessRecord, sig: signal.Signals) -> None:
    """Send `sig` to the record's process group, if the record's process still runs."""
    if is_running(record):
        _signal_group(record.pid, sig)


def kill_leader(record: ProcessRecord) -> None:
    """SIGKILL the leading process only (not its group), as a crash would; waits until gone."""
    if not is_running(record):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signal.SIGKILL)
    while start_time(record.pid) == record.start_time:
        _reap(record.pid)
        time.sleep(POLL)
    _reap(record.pid)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getpgid(int(entry)) == pgid and start_time(int(entry)) is not None:
                return True
        except ProcessLookupError:
            continue
    return False


def _reap(pid: int) -> None:
    # Only the command that started a process can reap it (tests do); elsewhere
    # init does, and waitpid says it is not our child.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def log_tail(log: Path) -> str:
    """The last three lines of a process's log, on one line: what an error shows of it."""
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(lines[-3:]) or "(empty log)"
