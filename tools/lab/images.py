"""Pure helpers for pods that run an image: names, manifests and the process an image runs.

- `normalize` gives a reference the full name containerd stores it under, as
  docker and nerdctl spell it: `frr` is `docker.io/library/frr:latest`,
  `frrouting/frr:v8` is `docker.io/frrouting/frr:v8`; a name whose first part
  is a registry (it has a `.` or a `:`, or is `localhost`) keeps it.
- `pick_manifest` chooses a multi-platform index's manifest for this machine.
- `process_args` is the argv the container starts with: None leaves the
  image's Entrypoint and Cmd to containerd; a `cmd` replaces the image's Cmd
  and keeps its Entrypoint, or replaces both (KNE's `command`), as docker
  and Kubernetes do.
- `environment` is the container's environment: the image's, then the lab's.
- `imported` reads the image names out of `ctr images import`'s output.
"""

from __future__ import annotations

import platform
import re
from typing import Any

INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
# Go's names for the machine's architecture, as image platforms give them.
GO_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le"}
_UNPACKING = re.compile(r"^unpacking (\S+) \(sha256:[0-9a-f]{64}\)\.\.\.done$", re.M)


def normalize(reference: str) -> str:
    """`reference` as containerd names it (see the module doc); a digest is kept as is."""
    name, at, digest = reference.partition("@")
    first, slash, _ = name.partition("/")
    if not slash or not ("." in first or ":" in first or first == "localhost"):
        name = f"docker.io/{name}" if slash else f"docker.io/library/{name}"
    if not at and ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return f"{name}{at}{digest}"


def machine_arch() -> str:
    machine = platform.machine()
    return GO_ARCH.get(machine, machine)


def pick_manifest(index: dict[str, Any], arch: str) -> str:
    """The digest of `index`'s linux/`arch` manifest; ValueError naming what it offers."""
    offered = []
    for manifest in index.get("manifests") or []:
        wanted = manifest.get("platform") or {}
        offered.append(f"{wanted.get('os')}/{wanted.get('architecture')}")
        if wanted.get("os") == "linux" and wanted.get("architecture") == arch:
            return str(manifest["digest"])
    raise ValueError(f"no linux/{arch} image in it (it has {', '.join(offered) or 'none'})")


def process_args(
    config: dict[str, Any], cmd: tuple[str, ...], keeps_entrypoint: bool
) -> list[str] | None:
    """The container's argv from the image's `config` (its `Entrypoint`, `Cmd`) and the lab
    file's `cmd`; None when the lab file gives none (containerd starts the image's own)."""
    if not cmd:
        return None
    if not keeps_entrypoint:
        return list(cmd)
    return [*(config.get("Entrypoint") or []), *cmd]


def environment(config: dict[str, Any], extra: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """The container's environment: the image's `Env`, then `extra` over it."""
    env = {}
    for item in config.get("Env") or []:
        key, _, value = str(item).partition("=")
        env[key] = value
    env.update(extra)
    return env


def imported(output: str) -> list[str]:
    """The images `ctr images import` printed that it unpacked, in its order."""
    return _UNPACKING.findall(output)
