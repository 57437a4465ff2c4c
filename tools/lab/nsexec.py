"""`python -m meshwire.tools.lab.nsexec NETNS -- CMD [ARGS...]`: run CMD inside a namespace.

The launcher the lab starts every node daemon and every `ping` through: it
`setns()`s into NETNS (a name under /var/run/netns or a path) and execs CMD,
so CMD keeps this process's PID (the lab records and stops that PID). Unlike
`ip netns exec` it remounts nothing. Exit status 127 with a message naming
NETNS or CMD when either is missing. It imports only what it needs (a
launch costs an interpreter start before CMD's own).
"""

from __future__ import annotations

import os
import sys

from meshwire.base.netns_thread import setns
from meshwire.tools.lab.lab_names import resolve

# The exit status when NETNS or CMD is missing, as a shell gives for a command not found.
NOT_STARTED = 127
USAGE = "usage: python -m meshwire.tools.lab.nsexec NETNS -- CMD [ARGS...]"


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(USAGE, file=sys.stderr)
        return 2
    target, command = argv[0], argv[2:]
    if not enter(target):
        return NOT_STARTED
    return execute(command)


def enter(target: str, who: str = "nsexec") -> bool:
    """Join the namespace `target` (name or path); False, with a message naming it, if
    that cannot be done."""
    try:
        setns(resolve(target))
    except OSError as exc:
        print(f"{who}: netns {target}: {exc.strerror or exc}", file=sys.stderr)
        return False
    return True


def execute(command: list[str], who: str = "nsexec") -> int:
    """Exec `command`; returns NOT_STARTED, with a message naming it, only if that fails."""
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"{who}: {command[0]}: {exc.strerror}", file=sys.stderr)
    return NOT_STARTED


def argv_for(netns: str, command: list[str]) -> list[str]:
    """The argv that runs `command` inside `netns` through this launcher."""
    return [sys.executable, "-m", "meshwire.tools.lab.nsexec", netns, "--", *command]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
