"""`meshwire cni uninstall`: take the shim out of the node's CNI chain, undoing `cni install`.

- Every `*.conflist` of `--conf-dir` loses its plugins of type `meshnet` that carry
  `meshwire_socket` (meshwire's entry; a `meshnet` entry of meshnet-cni itself has no
  such field and stays). A conflist that `cni install` made from a single-plugin
  config (its original kept as `<file>.meshwire-orig`) is replaced by that original.
- `--bin-dir`/meshnet is removed when it is meshwire's shim (the binary names the
  `meshwire_socket` field); meshnet-cni's own binary is left.
- Each file is rewritten atomically, so the runtime never reads half a config. Links
  already made stay: pods created afterwards are simply not handed to meshwire.

Running it twice changes nothing the second time. Every failure names the file; exit 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from meshwire.control.cni.frame import SOCKET_FIELD
from meshwire.control.cni.install import (
    BINARY_NAME,
    ORIGINAL_SUFFIX,
    PLUGIN_TYPE,
    InstallError,
    config_files,
    dump_json,
    load_json,
    write_atomically,
)


def unchained(conflist: dict[str, Any], source: str) -> dict[str, Any] | None:
    """`conflist` without meshwire's entries, or None if it has none."""
    plugins = conflist.get("plugins")
    if not isinstance(plugins, list):
        raise InstallError(f"{source}: field plugins must be a list")
    kept = [p for p in plugins if not _is_ours(p)]
    if len(kept) == len(plugins):
        return None
    return {**conflist, "plugins": kept}


def _is_ours(plugin: Any) -> bool:
    return isinstance(plugin, dict) and plugin.get("type") == PLUGIN_TYPE and SOCKET_FIELD in plugin


def unchain_configs(conf_dir: Path) -> list[tuple[Path, str]]:
    """Takes meshwire out of every conflist in conf_dir; returns (file, what was done)."""
    names = config_files(conf_dir)
    done: list[tuple[Path, str]] = []
    for name in names:
        if not name.endswith(".conflist"):
            continue
        path = conf_dir / name
        updated = unchained(load_json(path), str(path))
        if updated is None:
            continue
        originals = [
            conf_dir / n
            for n in names
            if n.endswith(ORIGINAL_SUFFIX)
            and Path(n.removesuffix(ORIGINAL_SUFFIX)).stem == path.stem
        ]
        if originals:
            restored = originals[0].with_name(originals[0].name.removesuffix(ORIGINAL_SUFFIX))
            os.replace(originals[0], restored)
            path.unlink()
            done.append((restored, f"restored (meshwire's {name} removed)"))
        else:
            write_atomically(path, dump_json(updated), 0o644)
            done.append((path, "unchained"))
    return done


def remove_binary(bin_dir: Path) -> tuple[Path, str]:
    target = bin_dir / BINARY_NAME
    try:
        data = target.read_bytes()
    except FileNotFoundError:
        return target, "not there"
    except OSError as exc:
        raise InstallError(f"{target}: {exc.strerror}") from None
    if SOCKET_FIELD.encode() not in data:
        return target, "left (not meshwire's shim)"
    target.unlink()
    return target, "removed"


def uninstall(bin_dir: Path, conf_dir: Path) -> list[tuple[Path, str]]:
    """The chain first (no runtime calls a removed binary), then the binary."""
    done = unchain_configs(conf_dir)
    done.append(remove_binary(bin_dir))
    return done


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="meshwire cni uninstall",
        description="Take the CNI shim out of the chain and remove it; links stay.",
    )
    parser.add_argument("--bin-dir", required=True, type=Path, help="CNI plugin directory")
    parser.add_argument("--conf-dir", required=True, type=Path, help="CNI config directory")
    args = parser.parse_args(argv)
    try:
        done = uninstall(args.bin_dir, args.conf_dir)
    except (InstallError, OSError) as exc:
        print(f"meshwire cni uninstall: {exc}", file=sys.stderr)
        return 1
    for path, action in done:
        print(f"{path}: {action}")
    return 0
