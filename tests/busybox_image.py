"""A small image for the suite, made in a second without docker or a registry: Debian's
static busybox with its applets as the root filesystem, written as a docker-archive by
scripts/mkimage.py (which `ctr images import` reads)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.paths import REPO

MKIMAGE = REPO / "scripts" / "mkimage.py"


def busybox_binary() -> Path:
    """Debian's busybox-static (a dynamic busybox cannot run in the image)."""
    for candidate in (Path("/bin/busybox"), Path("/usr/bin/busybox")):
        if candidate.exists():
            kind = subprocess.run(["ldd", str(candidate)], capture_output=True, text=True)
            if kind.returncode != 0:  # "not a dynamic executable"
                return candidate
    raise FileNotFoundError("a static busybox (busybox-static) is not installed")


def busybox_root(root: Path) -> Path:
    """`root` made a busybox system: /bin with every applet, root's passwd and group."""
    for sub in ("bin", "tmp", "etc", "root"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    box = root / "bin" / "busybox"
    box.write_bytes(busybox_binary().read_bytes())
    box.chmod(0o755)
    applets = subprocess.run([str(box), "--list"], capture_output=True, text=True, check=True)
    for applet in applets.stdout.split():
        if not (root / "bin" / applet).exists():
            (root / "bin" / applet).symlink_to("busybox")
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc" / "group").write_text("root:x:0:\n")
    return root


def write_image(
    root: Path,
    archive: Path,
    ref: str,
    cmd: Sequence[str],
    entrypoint: Sequence[str] = (),
) -> Path:
    """`root` as a docker-archive `archive` named `ref`, with that Cmd and Entrypoint."""
    argv = [sys.executable, str(MKIMAGE), str(root), str(archive), ref]
    for word in entrypoint:
        argv += ["--entrypoint", word]
    subprocess.run([*argv, "--cmd", *cmd], check=True, capture_output=True)
    return archive
