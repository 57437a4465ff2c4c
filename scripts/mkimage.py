"""Writes a directory as a single-layer docker-archive image (the `docker save` format).

    python scripts/mkimage.py ROOT OUT.tar REPO:TAG [--env K=V]... [--workdir DIR]
        [--entrypoint ARG]... [--cmd ARG...]

`ctr images import`, `docker load` and `podman load` read the result; no registry and no
docker are involved. The layer lists ROOT's entries in name order with uid/gid 0 and mtime 0,
so a ROOT with the same contents gives the same bytes. Device nodes are left out (a runtime
mounts /dev); directories, files, symlinks and hard links are kept with their modes.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import stat
import sys
import tarfile
import tempfile
from pathlib import Path

EPOCH = "1970-01-01T00:00:00Z"
CHUNK = 1 << 20


def write_layer(root: Path, out: io.BufferedWriter) -> None:
    """ROOT's tree as an uncompressed tar, in name order, owned by root, dated 0."""
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(dirs + files):
                path = os.path.join(directory, name)
                mode = os.lstat(path).st_mode
                if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                    continue
                info = tar.gettarinfo(path, os.path.relpath(path, root))
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = 0
                if info.isreg():
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def image_config(
    diff_id: str, env: list[str], workdir: str, cmd: list[str], entrypoint: list[str]
) -> bytes:
    runtime: dict[str, object] = {"Env": env, "Cmd": cmd or None, "WorkingDir": workdir}
    if entrypoint:
        runtime["Entrypoint"] = entrypoint
    config = {
        "architecture": "amd64" if os.uname().machine == "x86_64" else "arm64",
        "os": "linux",
        "created": EPOCH,
        "config": runtime,
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created": EPOCH, "created_by": "scripts/mkimage.py"}],
    }
    return json.dumps(config, sort_keys=True).encode()


def add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("ref", help="REPO:TAG")
    parser.add_argument("--env", action="append", default=[], metavar="K=V")
    parser.add_argument("--workdir", default="/")
    parser.add_argument("--entrypoint", action="append", default=[], metavar="ARG",
                        help="one word of the Entrypoint (repeat the flag for each)")  # fmt: skip
    parser.add_argument("--cmd", nargs=argparse.REMAINDER, default=[])
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        parser.error(f"{args.root}: not a directory")
    if ":" not in args.ref.rsplit("/", 1)[-1]:
        parser.error(f"{args.ref}: want REPO:TAG")
    with tempfile.TemporaryDirectory(dir=args.out.parent) as tmp:
        layer = Path(tmp) / "layer.tar"
        with open(layer, "wb") as f:
            write_layer(args.root, f)
        diff_id = sha256_of(layer)
        config = image_config(diff_id, args.env, args.workdir, args.cmd, args.entrypoint)
        config_id = hashlib.sha256(config).hexdigest()
        manifest = [
            {
                "Config": f"{config_id}.json",
                "RepoTags": [args.ref],
                "Layers": [f"{diff_id}/layer.tar"],
            }
        ]
        partial = Path(tmp) / "image.tar"
        with tarfile.open(partial, "w") as tar:
            add_bytes(tar, f"{config_id}.json", config)
            info = tarfile.TarInfo(f"{diff_id}/layer.tar")
            info.size = layer.stat().st_size
            with open(layer, "rb") as f:
                tar.addfile(info, f)
            add_bytes(tar, "manifest.json", json.dumps(manifest).encode())
        os.replace(partial, args.out)
        size = args.out.stat().st_size
    print(f"{args.out}: {args.ref} sha256:{config_id[:12]}, {size / 1e6:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
