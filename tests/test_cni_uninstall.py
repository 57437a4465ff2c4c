"""`meshwire cni uninstall` undoes `meshwire cni install` on a node's CNI folders
(temp dirs standing in for /opt/cni/bin and /etc/cni/net.d), and touches nothing else."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cni_helpers import build_c_shim, node

from meshwire.tools.cli import main as meshwire

BRIDGE_LIST = {
    "cniVersion": "0.4.0",
    "name": "node",
    "plugins": [{"type": "bridge", "bridge": "cni0"}, {"type": "loopback"}],
}
SINGLE = {"cniVersion": "0.4.0", "name": "mynet", "type": "bridge", "bridge": "cni0"}
# meshnet-cni's own entry: no meshwire_socket, so not meshwire's.
MESHNET_CNI = {"type": "meshnet", "name": "meshnet", "ipam": {}}

__all__ = ["node"]  # the fixture, imported from cni_helpers


def cni(node: Path, command: str, *extra: str) -> int:
    argv = ["cni", command, "--bin-dir", str(node / "bin"), "--conf-dir", str(node / "net.d")]
    return meshwire([*argv, *extra])


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data))


def snapshot(directory: Path) -> dict[str, Any]:
    return {p.name: json.loads(p.read_text()) for p in sorted(directory.iterdir())}


def test_uninstall_restores_a_conflist_install_chained_into(node: Path) -> None:
    write_json(node / "net.d" / "10-node.conflist", BRIDGE_LIST)
    before = snapshot(node / "net.d")
    assert cni(node, "install", "--shim", str(build_c_shim())) == 0
    assert snapshot(node / "net.d") != before
    assert cni(node, "uninstall") == 0
    assert snapshot(node / "net.d") == before
    assert not (node / "bin" / "meshnet").exists()


def test_uninstall_brings_back_the_single_plugin_config_install_converted(node: Path) -> None:
    write_json(node / "net.d" / "10-mynet.conf", SINGLE)
    assert cni(node, "install", "--shim", str(build_c_shim())) == 0
    assert sorted(p.name for p in (node / "net.d").iterdir()) == [
        "10-mynet.conf.meshwire-orig",
        "10-mynet.conflist",
    ]
    assert cni(node, "uninstall") == 0
    assert snapshot(node / "net.d") == {"10-mynet.conf": SINGLE}


def test_uninstall_twice_changes_nothing_more(
    node: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_json(node / "net.d" / "10-node.conflist", BRIDGE_LIST)
    assert cni(node, "install", "--shim", str(build_c_shim())) == 0
    assert cni(node, "uninstall") == 0
    after = snapshot(node / "net.d")
    capsys.readouterr()
    assert cni(node, "uninstall") == 0
    assert snapshot(node / "net.d") == after
    assert "not there" in capsys.readouterr().out


def test_meshnet_cnis_own_entry_and_binary_stay(node: Path) -> None:
    theirs = {**BRIDGE_LIST, "plugins": [*BRIDGE_LIST["plugins"], MESHNET_CNI]}
    write_json(node / "net.d" / "10-node.conflist", theirs)
    (node / "bin" / "meshnet").write_bytes(b"\x7fELF meshnet-cni's binary")
    assert cni(node, "uninstall") == 0
    assert snapshot(node / "net.d") == {"10-node.conflist": theirs}
    assert (node / "bin" / "meshnet").read_bytes() == b"\x7fELF meshnet-cni's binary"


def test_a_broken_conflist_is_named_and_nothing_else_changes(
    node: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (node / "net.d" / "10-bad.conflist").write_text("{not json")
    assert cni(node, "uninstall") == 1
    assert "10-bad.conflist" in capsys.readouterr().err
    assert (node / "net.d" / "10-bad.conflist").read_text() == "{not json"
