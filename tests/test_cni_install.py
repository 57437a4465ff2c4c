"""`meshwire cni install` on a node's CNI directories (temp dirs standing in for
/opt/cni/bin and /etc/cni/net.d)."""

from __future__ import annotations

import json
import stat
import struct
import sys
from pathlib import Path
from typing import Any

import pytest
from cni_helpers import (
    PREV_RESULT,
    InMemoryHandler,
    build_c_shim,
    cni_env,
    node,
    run_shim,
)

from meshwire.control.cni.endpoint import CniEndpoint
from meshwire.tools.cli import main as meshwire

KINDNET = {
    "cniVersion": "0.3.1",
    "name": "kindnet",
    "plugins": [
        {"type": "ptp", "ipMasq": False, "ipam": {"type": "host-local"}, "mtu": 1500},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
}
PT_INTERP = 3
OURS = {"type": "meshnet", "name": "meshwire", "meshwire_socket": "/run/meshwire/cni.sock"}
BRIDGE = {"cniVersion": "0.4.0", "name": "mynet", "type": "bridge", "bridge": "cni0"}

__all__ = ["node"]  # the fixture, imported from cni_helpers


def install(node: Path, *extra: str) -> int:
    argv = ["cni", "install", "--bin-dir", str(node / "bin"), "--conf-dir", str(node / "net.d")]
    return meshwire([*argv, "--shim", str(build_c_shim()), *extra])


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data))


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def elf_interpreter(binary: Path) -> bytes | None:
    """The program interpreter (dynamic loader) an x86-64 ELF names, None if none."""
    data = binary.read_bytes()
    assert data[:5] == b"\x7fELF\x02", "expected a 64-bit ELF"
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for k in range(phnum):
        header = phoff + k * phentsize
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", data, header)
        if p_type == PT_INTERP:
            return data[p_offset : p_offset + p_filesz].rstrip(b"\0")
    return None


def test_the_shim_needs_no_loader_or_libc_from_the_host() -> None:
    # The runtime execs it with the host's libc, which may be older than the
    # image's: a dynamically linked shim failed with "GLIBC_2.34 not found".
    assert elf_interpreter(build_c_shim()) is None


def test_a_dynamically_linked_program_is_seen_as_one() -> None:
    assert elf_interpreter(Path(sys.executable).resolve()) is not None


def test_the_shim_lands_as_meshnet_and_is_chained_last_into_the_conflist(node: Path) -> None:
    write_json(node / "net.d" / "10-kindnet.conflist", KINDNET)
    assert install(node) == 0
    binary = node / "bin" / "meshnet"
    assert binary.read_bytes() == build_c_shim().read_bytes()
    assert stat.S_IMODE(binary.stat().st_mode) == 0o755
    conflist = read_json(node / "net.d" / "10-kindnet.conflist")
    assert conflist["plugins"] == [
        *KINDNET["plugins"],
        OURS,
    ]
    assert (conflist["name"], conflist["cniVersion"]) == ("kindnet", "0.3.1")
    assert sorted(p.name for p in (node / "net.d").iterdir()) == ["10-kindnet.conflist"]


def test_installing_twice_changes_nothing(node: Path) -> None:
    write_json(node / "net.d" / "10-kindnet.conflist", KINDNET)
    assert install(node) == 0
    before = snapshot(node / "net.d") | snapshot(node / "bin")
    assert install(node) == 0
    assert snapshot(node / "net.d") | snapshot(node / "bin") == before


def test_only_the_first_conflist_by_name_is_chained(node: Path) -> None:
    write_json(node / "net.d" / "20-other.conflist", KINDNET | {"name": "other"})
    write_json(node / "net.d" / "10-kindnet.conflist", KINDNET)
    assert install(node) == 0
    assert len(read_json(node / "net.d" / "10-kindnet.conflist")["plugins"]) == 3
    assert read_json(node / "net.d" / "20-other.conflist") == KINDNET | {"name": "other"}


def test_the_socket_comes_from_the_daemon_config_and_follows_its_changes(node: Path) -> None:
    write_json(node / "net.d" / "10-kindnet.conflist", KINDNET)
    config = node / "meshwire.yaml"
    config.write_text("node_name: n1\ncni:\n  socket: /run/mw-a/cni.sock\n")
    assert install(node, "--config", str(config)) == 0
    config.write_text("cni:\n  socket: /run/mw-b/cni.sock\n")
    assert install(node, "--config", str(config)) == 0
    plugins = read_json(node / "net.d" / "10-kindnet.conflist")["plugins"]
    ours = [p for p in plugins if p["type"] == "meshnet"]
    assert ours == [
        {"type": "meshnet", "name": "meshwire", "meshwire_socket": "/run/mw-b/cni.sock"}
    ]


def test_a_config_without_cni_socket_means_the_default(node: Path) -> None:
    write_json(node / "net.d" / "10-kindnet.conflist", KINDNET)
    config = node / "meshwire.yaml"
    config.write_text("node_name: n1\n")
    assert install(node, "--config", str(config)) == 0
    plugins = read_json(node / "net.d" / "10-kindnet.conflist")["plugins"]
    assert plugins[-1]["meshwire_socket"] == "/run/meshwire/cni.sock"


def test_a_single_plugin_conf_becomes_a_chain_and_the_original_is_kept_aside(node: Path) -> None:
    write_json(node / "net.d" / "10-bridge.conf", BRIDGE)
    for _ in range(2):
        assert install(node) == 0
        assert sorted(p.name for p in (node / "net.d").iterdir()) == [
            "10-bridge.conf.meshwire-orig",
            "10-bridge.conflist",
        ]
        assert read_json(node / "net.d" / "10-bridge.conflist") == {
            "cniVersion": "0.4.0",
            "name": "mynet",
            "plugins": [
                {"type": "bridge", "bridge": "cni0"},
                {
                    "type": "meshnet",
                    "name": "meshwire",
                    "meshwire_socket": "/run/meshwire/cni.sock",
                },
            ],
        }
    assert read_json(node / "net.d" / "10-bridge.conf.meshwire-orig") == BRIDGE


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ({}, "no CNI config"),
        ({"10-x.conflist": "{not json"}, "10-x.conflist: cannot read it as JSON"),
        ({"10-x.conflist": '{"name": "x", "plugins": {}}'}, "field plugins must be a list"),
        ({"10-x.conf": '{"type": "bridge"}'}, "10-x.conf: field name must be"),
    ],
)
def test_a_config_dir_it_cannot_chain_into_fails_naming_the_file(
    node: Path, setup: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, text in setup.items():
        (node / "net.d" / name).write_text(text)
    before = snapshot(node / "net.d")
    assert install(node) == 1
    assert message in capsys.readouterr().err
    assert snapshot(node / "net.d") == before


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cni: [1]\n", "key cni must be a mapping"),
        ("cni:\n  socket: 5\n", "key cni.socket must be an absolute path"),
        ("cni:\n  socket: relative.sock\n", "key cni.socket must be an absolute path"),
        ("- a list\n", "must be a mapping"),
        ("cni: {socket: [\n", "not YAML"),
    ],
)
def test_a_bad_daemon_config_fails_naming_the_key(
    node: Path, text: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    write_json(node / "net.d" / "10-kindnet.conflist", KINDNET)
    config = node / "meshwire.yaml"
    config.write_text(text)
    assert install(node, "--config", str(config)) == 1
    assert message in capsys.readouterr().err
    assert not (node / "bin" / "meshnet").exists()


def test_a_missing_shim_binary_fails_saying_how_to_build_it(
    node: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_json(node / "net.d" / "10-kindnet.conflist", KINDNET)
    assert install(node, "--shim", str(node / "nope")) == 1
    assert "scripts/build.sh" in capsys.readouterr().err


async def test_the_runtime_running_the_installed_chain_reaches_the_daemon(node: Path) -> None:
    write_json(node / "net.d" / "10-kindnet.conflist", KINDNET)
    config = node / "meshwire.yaml"
    socket = node / "run" / "cni.sock"
    config.write_text(f"cni:\n  socket: {socket}\n")
    assert install(node, "--config", str(config)) == 0
    conflist = read_json(node / "net.d" / "10-kindnet.conflist")
    # What a runtime passes the last plugin: the list's name and version, the previous result.
    plugin_config = conflist["plugins"][-1] | {
        "name": conflist["name"],
        "cniVersion": conflist["cniVersion"],
        "prevResult": PREV_RESULT | {"cniVersion": "0.3.1"},
    }
    handler = InMemoryHandler(in_topology={"default/r1"})
    async with CniEndpoint(str(socket), handler):
        shim = str(node / "bin" / "meshnet")
        run = await run_shim(shim, cni_env("ADD"), plugin_config)
    assert run.exit == 0
    assert run.result == plugin_config["prevResult"]
    assert "default/r1" in handler.pods
