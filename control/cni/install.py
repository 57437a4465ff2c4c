"""`meshwire cni install`: put the shim in place and chain it into the node's CNI config.

- The C shim is copied into `--bin-dir` as `meshnet` (the plugin `type` that
  meshnet's users already have), atomically: a temp file in the same directory
  renamed over the old one, so a runtime exec'ing it never sees half a binary.
  An identical binary is left alone.
- The plugin is chained into the first `*.conflist` of `--conf-dir` (sorted by
  name), by appending `{"type": "meshnet", "name": "meshwire",
  "meshwire_socket": <cni.socket>}` to its `plugins`. Already there: only the
  socket is brought up to date. So running it twice changes nothing.
- No conflist, only a single-plugin `*.conf`/`*.json`: like meshnet's
  entrypoint, meshwire wraps the existing plugin (meshnet makes it its
  `delegate`; meshwire makes it the first plugin of a chain). The result is
  written as `<stem>.conflist` and the original renamed to
  `<file>.meshwire-orig`, which the runtime ignores, so exactly one config
  remains in force and nothing is lost.

The socket is `cni.socket` from `--config` (YAML), default
/run/meshwire/cni.sock: the shim reads it from the `meshwire_socket` field.
Every failure names the file and the field; exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from meshwire.control.cni.frame import DEFAULT_SOCKET, SOCKET_FIELD

PLUGIN_TYPE = "meshnet"
PLUGIN_NAME = "meshwire"
BINARY_NAME = "meshnet"
DEFAULT_SHIM = Path(__file__).resolve().parents[2] / "cext" / "build" / "meshwire-cni"
ORIGINAL_SUFFIX = ".meshwire-orig"
# Conflists only got `plugins` (chaining) in 0.3.0; a .conf without a version is older.
FALLBACK_VERSION = "0.3.0"


class InstallError(Exception):
    """Why the install stopped; the message names the file and the field."""


# --- pure: what the config files become ---------------------------------------------


def plugin_entry(socket: str) -> dict[str, Any]:
    return {"type": PLUGIN_TYPE, "name": PLUGIN_NAME, SOCKET_FIELD: socket}


def chained(conflist: dict[str, Any], socket: str, source: str) -> dict[str, Any] | None:
    """`conflist` with meshwire chained last, or None if it already is, with this socket."""
    plugins = conflist.get("plugins")
    if not isinstance(plugins, list) or not all(isinstance(p, dict) for p in plugins):
        raise InstallError(f"{source}: field plugins must be a list of objects")
    ours = [i for i, p in enumerate(plugins) if p.get("type") == PLUGIN_TYPE]
    if ours and all(plugins[i].get(SOCKET_FIELD) == socket for i in ours):
        return None
    updated = [dict(p) for p in plugins]
    for i in ours:
        updated[i][SOCKET_FIELD] = socket
    if not ours:
        updated.append(plugin_entry(socket))
    return {**conflist, "plugins": updated}


def converted(conf: dict[str, Any], socket: str, source: str) -> dict[str, Any]:
    """A single-plugin config turned into a conflist: that plugin, then meshwire."""
    if "plugins" in conf:
        return chained(conf, socket, source) or conf
    name = conf.get("name")
    if not isinstance(name, str) or not name:
        raise InstallError(f"{source}: field name must be a non-empty string")
    version = conf.get("cniVersion", FALLBACK_VERSION)
    plugin = {k: v for k, v in conf.items() if k not in ("name", "cniVersion")}
    return {"cniVersion": version, "name": name, "plugins": [plugin, plugin_entry(socket)]}


def socket_from_config(text: str, source: str) -> str:
    """`cni.socket` from the daemon's YAML config text; the default if unset."""
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InstallError(f"{source}: not YAML: {exc}") from None
    if config is None:
        return DEFAULT_SOCKET
    if not isinstance(config, dict):
        raise InstallError(f"{source}: the config must be a mapping")
    cni = config.get("cni")
    if cni is None:
        return DEFAULT_SOCKET
    if not isinstance(cni, dict):
        raise InstallError(f"{source}: key cni must be a mapping")
    socket = cni.get("socket", DEFAULT_SOCKET)
    if not isinstance(socket, str) or not socket.startswith("/"):
        raise InstallError(f"{source}: key cni.socket must be an absolute path, got {socket!r}")
    return socket


# --- effects ----------------------------------------------------------------------


def install_binary(shim: Path, bin_dir: Path) -> tuple[Path, bool]:
    """Copies `shim` to bin_dir/meshnet; returns the path and whether it changed."""
    try:
        data = shim.read_bytes()
    except OSError as exc:
        raise InstallError(
            f"shim {shim}: {exc.strerror or exc}; build it with scripts/build.sh or pass --shim"
        ) from None
    target = bin_dir / BINARY_NAME
    if target.is_file() and target.read_bytes() == data:
        return target, False
    write_atomically(target, data, 0o755)
    return target, True


def config_files(conf_dir: Path) -> list[str]:
    """The names of conf_dir's files, sorted as the runtime reads them."""
    try:
        return sorted(p.name for p in conf_dir.iterdir() if p.is_file())
    except OSError as exc:
        raise InstallError(f"--conf-dir {conf_dir}: {exc.strerror}") from None


def chain_into_config(conf_dir: Path, socket: str) -> tuple[Path, str]:
    """Chains meshwire into conf_dir's config; returns the file and what was done."""
    names = config_files(conf_dir)
    conflists = [n for n in names if n.endswith(".conflist")]
    if conflists:
        path = conf_dir / conflists[0]
        updated = chained(load_json(path), socket, str(path))
        if updated is None:
            return path, "already chained"
        write_atomically(path, dump_json(updated), 0o644)
        return path, "chained"
    singles = [n for n in names if n.endswith((".conf", ".json"))]
    if not singles:
        raise InstallError(
            f"--conf-dir {conf_dir}: no CNI config (*.conflist, *.conf, *.json); "
            "install the primary CNI first"
        )
    original = conf_dir / singles[0]
    target = original.with_suffix(".conflist")
    conflist = converted(load_json(original), socket, str(original))
    write_atomically(target, dump_json(conflist), 0o644)
    os.replace(original, original.with_name(original.name + ORIGINAL_SUFFIX))
    return target, f"converted from {original.name}"


def load_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise InstallError(f"{path}: cannot read it as JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InstallError(f"{path}: a CNI config must be a JSON object")
    return data


def dump_json(config: dict[str, Any]) -> bytes:
    return (json.dumps(config, indent=2) + "\n").encode()


def write_atomically(target: Path, data: bytes, mode: int) -> None:
    # A dot-name without a config suffix: the runtime never loads the temp file.
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as exc:
        raise InstallError(f"{target}: cannot write in {target.parent}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --- command ----------------------------------------------------------------------


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="meshwire cni install",
        description="Install the CNI shim as `meshnet` and chain it into the first conflist.",
    )
    parser.add_argument("--bin-dir", required=True, type=Path, help="CNI plugin directory")
    parser.add_argument("--conf-dir", required=True, type=Path, help="CNI config directory")
    parser.add_argument("--config", type=Path, help="daemon config file (reads cni.socket)")
    parser.add_argument("--shim", type=Path, default=DEFAULT_SHIM, help="the built C shim")
    args = parser.parse_args(argv)
    try:
        socket = DEFAULT_SOCKET
        if args.config is not None:
            try:
                text = args.config.read_text()
            except OSError as exc:
                raise InstallError(f"--config {args.config}: {exc.strerror}") from None
            socket = socket_from_config(text, str(args.config))
        binary, replaced = install_binary(args.shim, args.bin_dir)
        conf, action = chain_into_config(args.conf_dir, socket)
    except (InstallError, OSError) as exc:
        print(f"meshwire cni install: {exc}", file=sys.stderr)
        return 1
    print(f"{binary}: {'installed' if replaced else 'up to date'}")
    print(f"{conf}: {action} (socket {socket})")
    return 0
