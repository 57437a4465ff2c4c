"""The C shim is built hardened (issue #39): the runtime execs it as root on every node.

Checked on the built binary itself, as a packager's hardening check would:
position independent (static-pie), relocations read-only and bound at start
(RELRO, BIND_NOW), and libc calls checked where the compiler can (fortify).
"""

from __future__ import annotations

import subprocess

from cni_helpers import build_c_shim


def readelf(*flags: str) -> str:
    argv = ["readelf", "-W", *flags, str(build_c_shim())]
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def test_the_shim_is_a_position_independent_executable() -> None:
    assert "DYN (Position-Independent Executable file)" in readelf("-h")
    assert "PIE" in readelf("-d")


def test_the_shim_has_full_relro() -> None:
    assert "GNU_RELRO" in readelf("-l")
    assert "BIND_NOW" in readelf("-d")


def test_the_shim_links_no_shared_library() -> None:
    # Static: it runs against no host libc, whatever its version.
    assert "NEEDED" not in readelf("-d")
    assert "INTERP" not in readelf("-l")


def test_the_shim_uses_checked_libc_calls_and_stack_canaries() -> None:
    symbols = readelf("-s")
    assert "__stack_chk_fail" in symbols
    assert "__snprintf_chk" in symbols  # the shim's own snprintf, fortified
