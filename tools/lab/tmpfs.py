"""The lab directory's own tmpfs, where the default root is not on one.

A lab directory lives exactly as long as the lab, and `up` writes thousands of
small files into it (a sandbox link and a sandbox record per pod, the state
file, logs, the API's database and its journal). `/run` is a tmpfs on most
machines. Where it is a disk filesystem instead, every new file costs an
inode allocation, and ext4 scans past each recently freed inode to find one:
after a few labs came and went, the 1,000 sandbox links of a 1,000-pod lab
took 0.8 CPU-s. There `up` mounts a tmpfs of its own on the lab directory,
named `SOURCE`, and `down` unmounts it; nothing else is ever mounted or
unmounted here.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from meshwire.tools.lab.errors import LabError

SOURCE = "meshwire-lab"
TMPFS_MAGIC = 0x01021994
MS_NOSUID = 0x2
MS_NODEV = 0x4
MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


def on_tmpfs(path: Path) -> bool:
    """Whether the filesystem holding `path` (or its nearest existing parent) is a tmpfs."""
    while not path.exists() and path != path.parent:
        path = path.parent
    # struct statfs starts with f_type (a long); the rest is room for the kernel to fill.
    buffer = ctypes.create_string_buffer(256)
    if _libc.statfs(str(path).encode(), buffer) != 0:
        return False
    return ctypes.c_long.from_buffer(buffer).value == TMPFS_MAGIC


def mount(path: Path) -> None:
    """Mount a tmpfs named SOURCE on the (existing, empty) directory `path`."""
    flags = MS_NOSUID | MS_NODEV
    if _libc.mount(SOURCE.encode(), str(path).encode(), b"tmpfs", flags, b"mode=0755") != 0:
        code = ctypes.get_errno()
        raise LabError(f"lab directory {path}: mount a tmpfs: {os.strerror(code)}")


def ours(path: Path) -> bool:
    """Whether `path` is the mount point of a tmpfs named SOURCE."""
    target = os.path.realpath(path)
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        before, _, after = line.partition(" - ")
        fields, rest = before.split(), after.split()
        if len(fields) < 5 or len(rest) < 2 or _unescape(fields[4]) != target:
            continue
        if rest[0] == "tmpfs" and rest[1] == SOURCE:
            return True
    return False


def unmount(path: Path) -> None:
    """Unmount the lab's own tmpfs at `path`, with everything in it; anything else there
    (no mount, or another one) is left alone."""
    if ours(path) and _libc.umount2(str(path).encode(), MNT_DETACH) != 0:
        code = ctypes.get_errno()
        raise LabError(f"lab directory {path}: unmount its tmpfs: {os.strerror(code)}")


def _unescape(field: str) -> str:
    # mountinfo writes a space, tab, newline and backslash as octal escapes.
    for escaped, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(escaped, char)
    return field
