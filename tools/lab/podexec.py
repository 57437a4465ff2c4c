"""`meshwire lab exec POD [-i] [-t] [--] CMD...` and `meshwire lab logs POD [-f]`.

`exec` runs CMD inside the pod's namespaces (holder.py), those of its
container when it runs an image (containerd.py), as `docker exec` does: its
hostname, files and processes are the pod's, its environment is the pod's
(the lab file's `env`, and an image's own), and the exit status is CMD's
(126: the pod is not running, 127: no such command). Without `-i` CMD's stdin is empty; with
`-t` it runs on a new terminal whose output is relayed (and, with `-i`, the
input too, the caller's terminal in raw mode meanwhile). Ctrl-C reaches CMD,
not this command.

`logs` prints the output of the pod's `cmd` or container (its log in the lab
directory, over every restart); with `-f` it then follows, until it ends or
Ctrl-C.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import time
from pathlib import Path

from meshwire.tools.lab import software
from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.state import LabDir, LabState

# Seconds between two looks at a followed log.
FOLLOW_POLL = 0.2


def exec_in_pod(
    state: LabState, name: str, command: list[str], interactive: bool, tty: bool
) -> int:
    """Run `command` in pod `name`; returns its exit status (128+N: killed by signal N)."""
    if not command:
        raise LabError("exec: give the command to run (lab exec POD -- CMD...)")
    pod = state.pod(name)
    argv, env = software.pod_command(state, pod, command)
    if tty:
        env["TERM"] = os.environ.get("TERM", "xterm")
        return _on_terminal(argv, env, interactive)
    proc = subprocess.Popen(argv, env=env, stdin=None if interactive else subprocess.DEVNULL)
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            continue  # the terminal sent SIGINT to the command too: wait for its status


def _on_terminal(argv: list[str], env: dict[str, str], interactive: bool) -> int:
    """`argv` on a new pseudo-terminal (pty.spawn relays it); this process exits after it,
    so its own environment and stdin may be replaced."""
    if not interactive:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    os.environ.clear()
    os.environ.update(env)
    sys.stdout.flush()
    status = pty.spawn(argv)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def show_logs(lab: LabDir, state: LabState, name: str, follow: bool) -> int:
    """Print the pod's `cmd` output; with `follow`, go on until the `cmd` ends."""
    pod = state.pod(name)
    spec = software.spec_of(state, pod)
    if not spec.cmd and not spec.image:
        raise LabError(f"pod {pod.key}: its lab file gives it no cmd or image, so it has no logs")
    log = software.logs(lab, pod)
    offset = _copy(log, 0)
    if not follow:
        return 0
    try:
        while True:
            done = not software.main_running(state, pod)
            time.sleep(FOLLOW_POLL)
            offset = _copy(log, offset)
            if done:
                return 0
            state = lab.load()  # a restarted pod's cmd or container is a new process
    except KeyboardInterrupt:
        return 0


def _copy(log: Path, offset: int) -> int:
    """Write what `log` holds past `offset` to stdout; the new offset."""
    try:
        with open(log, "rb") as src:
            src.seek(offset)
            data = src.read()
    except FileNotFoundError:
        return offset
    if data:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    return offset + len(data)
