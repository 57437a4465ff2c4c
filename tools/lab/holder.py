"""The pod holder, `meshwire-pod` (cext/pod_holder.c): a lab pod's namespaces and entering them.

`start_holder` starts one holder for a pod: it joins the pod's network
namespace and holds new UTS (hostname = pod name), IPC, mount (private
/tmp, /var/tmp, /run, /var/run, the pod's binds) and PID namespaces until stopped,
as a pause container does; it returns once they are made, or raises
LabError with the holder's message. Stopping the holder's process group
stops every process of the pod (its PID namespace ends).

`stop_strays` stops the holders of a lab's namespaces that no record names (a
command that died between starting a holder and recording it): `lab down` runs
it after stopping every recorded process.

`exec_argv` is the argv that runs a command inside a running holder's
namespaces; its exit status is the command's (126: the pod is gone, 127:
no such command). Python 3.11 has no setns for these namespaces: the
binary does it.
"""

from __future__ import annotations

import os
import select
import time
from pathlib import Path

from meshwire.control.model.podspec import Bind
from meshwire.dataplane.rundir import start_time
from meshwire.tools.lab import processes
from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.runtime import REPO
from meshwire.tools.lab.state import ProcessRecord

HOLDER = REPO / "cext" / "build" / "meshwire-pod"
# The holder makes its namespaces in milliseconds; a loaded machine may take seconds.
READY_TIMEOUT = 30.0
# A hostname is at most 64 bytes (sethostname); a pod name may be longer.
HOSTNAME_MAX = 64
# What a process in a pod finds in its environment before the lab file's `env`.
BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}


def binary() -> Path:
    """The holder binary; LabError saying how to build it when it is missing."""
    if not os.access(HOLDER, os.X_OK):
        raise LabError(f"{HOLDER} is not built: run scripts/build.sh (or make setup)")
    return HOLDER


def hostname(pod_name: str) -> str:
    return pod_name[:HOSTNAME_MAX].rstrip(".")


def start_holder(role: str, netns: Path, name: str, binds: list[Bind], log: Path) -> ProcessRecord:
    """Start the holder of pod `name` in `netns`; returns once its namespaces exist."""
    read, write = os.pipe()
    argv = [str(binary()), "hold", "--netns", str(netns), "--hostname", hostname(name)]
    for bind in binds:
        argv += ["--bind", bind.spec()]
    argv += ["--ready", str(write)]
    try:
        record = processes.start(role, argv, log, env=dict(BASE_ENV), pass_fds=(write,))
    finally:
        os.close(write)
    try:
        answer = _read_until_eof(read, READY_TIMEOUT)
    finally:
        os.close(read)
    if answer != b"ready\n":
        processes.stop(record)
        if answer is None:
            raise LabError(f"pod {name}: its holder gave no answer in {READY_TIMEOUT:.0f}s")
        raise LabError(f"pod {name}: its holder failed: {processes.log_tail(log)}")
    return record


def exec_argv(holder: ProcessRecord, command: list[str] | tuple[str, ...]) -> list[str]:
    """The argv that runs `command` in the namespaces of `holder`'s pod."""
    return exec_argv_pid(holder.pid, command)


def exec_argv_pid(pid: int, command: list[str] | tuple[str, ...]) -> list[str]:
    """The argv that runs `command` in the namespaces of process `pid` (and of the children
    it makes): a pod's holder, or the first process of a pod's container."""
    return [str(binary()), "exec", str(pid), "--", *command]


def pod_env(name: str, env: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """The environment of a command run in pod `name`: BASE_ENV, HOSTNAME, then `env`."""
    return {**BASE_ENV, "HOSTNAME": hostname(name), **dict(env)}


def _read_until_eof(fd: int, timeout: float) -> bytes | None:
    """What `fd` gives until EOF; None if EOF has not come after `timeout`."""
    data = b""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 64)
        if not chunk:
            return data
        data += chunk


def stray_holders(netns_prefix: str) -> list[int]:
    """The pids of the running holders (this binary's `hold`) of a netns whose path starts
    with `netns_prefix`; the holder's child in its PID namespace is one of them too."""
    binary_path = str(HOLDER).encode()

    def held_under(argv: list[bytes]) -> bool:
        if argv[:2] != [binary_path, b"hold"] or b"--netns" not in argv[:-1]:
            return False
        netns = argv[argv.index(b"--netns") + 1]
        return netns.decode(errors="replace").startswith(netns_prefix)

    return processes.pids_whose_argv(held_under)


def stop_strays(netns_prefix: str) -> list[int]:
    """Stop, by pid, the process group of every holder `stray_holders` finds, as
    `processes.stop` stops a recorded one (nothing records these, so nothing else would
    stop them); returns their pids."""
    strays = stray_holders(netns_prefix)
    for pid in strays:
        processes.stop(ProcessRecord("unrecorded holder", pid, start_time(pid) or 0, [], ""))
    return strays
