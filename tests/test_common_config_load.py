"""The daemon config: defaults, and which source wins (file < environment < --set)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from meshwire.control.common.config import Config, defaults_yaml, load_config, parse_overrides

NODE = {"MESHWIRE_NODE_IP": "192.0.2.10"}


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_with_only_node_ip_every_key_has_its_documented_default() -> None:
    config = load_config(env=NODE)
    assert config.node_ip == "192.0.2.10"
    assert config.node_name == socket.gethostname()
    assert config.inter_node_link_type == "vxlan"
    assert config.mtu == 1500
    assert config.workers == 0
    assert config.worker_count >= 1
    assert config.api.url == ""
    assert config.api.kubeconfig == ""
    assert config.cni.socket == "/run/meshwire/cni.sock"
    assert config.peer.listen == ":51111"
    assert config.metrics.listen == ":51100"
    assert config.vxlan.vni_base == 5000
    assert config.reconcile.debounce == 0.05
    assert config.reconcile.backoff_min == 0.1
    assert config.reconcile.backoff_max == 60.0


def test_the_process_environment_is_read_when_none_is_passed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MESHWIRE_NODE_IP", "192.0.2.77")
    assert load_config().node_ip == "192.0.2.77"


def test_an_empty_node_name_means_the_host_name(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", 'node_name: ""\nnode_ip: 192.0.2.1\n')
    assert load_config(path, env={}).node_name == socket.gethostname()


def test_the_file_sets_keys_at_any_depth(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.yaml",
        "node_name: n1\nnode_ip: 10.0.0.5\ninter_node_link_type: grpc\nmtu: 9000\n"
        "api:\n  url: http://api.example:8080\ncni:\n  socket: /tmp/x.sock\n"
        "log:\n  format: text\n",
    )
    config = load_config(path, env={})
    assert (config.node_name, config.node_ip) == ("n1", "10.0.0.5")
    assert config.inter_node_link_type == "grpc"
    assert config.mtu == 9000
    assert config.api.url == "http://api.example:8080"
    assert config.api.kubeconfig == ""  # a section's other keys keep their defaults
    assert config.cni.socket == "/tmp/x.sock"
    assert config.log.format == "text"


def test_an_empty_file_is_all_defaults(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", "# nothing set\n")
    assert load_config(path, env=NODE) == load_config(env=NODE)


def test_the_environment_overrides_the_file_and_set_overrides_both(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.yaml",
        "node_ip: 10.0.0.1\nmtu: 1400\napi:\n  url: http://from-file\n  namespace: lab\n",
    )
    env = {"MESHWIRE_API__URL": "http://from-env", "MESHWIRE_MTU": "9000"}
    config = load_config(path, env=env, overrides={"api.url": "http://from-set"})
    assert config.api.url == "http://from-set"
    assert config.mtu == 9000  # env over file; the string is converted
    assert config.api.namespace == "lab"  # untouched by env and --set
    assert config.node_ip == "10.0.0.1"

    assert load_config(path, env=env).api.url == "http://from-env"
    assert load_config(path, env={}).api.url == "http://from-file"


def test_environment_names_map_to_keys_with_double_underscore_for_nesting() -> None:
    env = {
        "MESHWIRE_NODE_IP": "2001:db8::1",
        "MESHWIRE_NODE_NAME": "worker-3",
        "MESHWIRE_INTER_NODE_LINK_TYPE": "grpc",
        "MESHWIRE_METRICS__LISTEN": "[::]:9100",
        "MESHWIRE_DATAPLANE__OFFLOADS": "false",
        "MESHWIRE_RECONCILE__FULL_INTERVAL": "5",
        "OTHER_NODE_IP": "ignored",
    }
    config = load_config(env=env)
    assert config.node_ip == "2001:db8::1"
    assert config.node_name == "worker-3"
    assert config.inter_node_link_type == "grpc"
    assert config.metrics.listen == "[::]:9100"
    assert config.dataplane.offloads is False
    assert config.reconcile.full_interval == 5.0


def test_set_pairs_split_at_the_first_equals_sign() -> None:
    assert parse_overrides(["api.url=http://h:1/?a=b", "log.level=debug"]) == {
        "api.url": "http://h:1/?a=b",
        "log.level": "debug",
    }
    assert parse_overrides(["api.namespace="]) == {"api.namespace": ""}


def test_the_printed_defaults_load_back_to_the_default_config(tmp_path: Path) -> None:
    text = defaults_yaml()
    path = write(tmp_path / "defaults.yaml", text.replace('node_ip: ""', 'node_ip: "192.0.2.1"'))
    assert load_config(path, env={}) == Config(node_ip="192.0.2.1")


def test_the_printed_defaults_name_every_key_of_the_model() -> None:
    printed = yaml.safe_load(defaults_yaml())
    expected = Config(node_ip="192.0.2.1").model_dump()
    assert _keys(printed) == _keys(expected)


def test_meshwire_config_defaults_prints_the_same_file() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "meshwire.tools.cli", "config", "defaults"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == defaults_yaml()


def _keys(tree: dict[str, object], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for name, value in tree.items():
        if isinstance(value, dict):
            out |= _keys(value, f"{prefix}{name}.")
        else:
            out.add(prefix + name)
    return out
