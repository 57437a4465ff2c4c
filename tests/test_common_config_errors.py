"""A bad config is refused at start, and the message names the key (and where it came from)."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshwire.control.common.config import ConfigError, load_config, parse_overrides

NODE = {"MESHWIRE_NODE_IP": "192.0.2.10"}


def refused(
    path: Path | None = None,
    env: dict[str, str] | None = None,
    overrides: dict[str, str] | None = None,
) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(path, env=NODE if env is None else env, overrides=overrides)
    return str(caught.value)


def config_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "meshwire.yaml"
    path.write_text(text)
    return path


def test_an_unknown_key_in_the_file_is_named_with_its_section(tmp_path: Path) -> None:
    message = refused(config_file(tmp_path, "api:\n  urll: http://x\n"))
    assert "api.urll: unknown key" in message
    assert str(tmp_path / "meshwire.yaml") in message


def test_an_unknown_top_level_key_is_named(tmp_path: Path) -> None:
    assert "mut: unknown key" in refused(config_file(tmp_path, "mut: 9000\n"))


def test_a_value_of_the_wrong_type_is_named_with_what_was_given(tmp_path: Path) -> None:
    message = refused(config_file(tmp_path, "mtu: jumbo\n"))
    assert "mtu:" in message
    assert "'jumbo'" in message


def test_a_value_out_of_range_is_named() -> None:
    message = refused(overrides={"mtu": "20"})
    assert "mtu:" in message
    assert "68" in message


def test_a_value_outside_the_enum_lists_the_choices() -> None:
    message = refused(overrides={"inter_node_link_type": "gre"})
    assert "inter_node_link_type:" in message
    assert "'vxlan'" in message and "'grpc'" in message
    assert "'gre'" in message


def test_a_nested_enum_is_named_with_its_section() -> None:
    assert "log.level:" in refused(overrides={"log.level": "verbose"})


@pytest.mark.parametrize("key", ["peer.listen", "metrics.listen"])
@pytest.mark.parametrize("value", ["51100", "host:port", "host:70000", "0.0.0.0:", "::1:51100"])
def test_a_listen_address_must_be_host_port(key: str, value: str) -> None:
    message = refused(overrides={key: value})
    assert f"{key}:" in message
    assert "HOST:PORT" in message
    assert repr(value) in message


def test_node_ip_is_required() -> None:
    message = refused(env={})
    assert "node_ip: required" in message


def test_node_ip_must_be_an_address() -> None:
    message = refused(env={"MESHWIRE_NODE_IP": "node-1"})
    assert "node_ip:" in message
    assert "'node-1'" in message


def test_a_file_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    path = config_file(tmp_path, "- node_ip: 10.0.0.1\n")
    message = refused(path)
    assert str(path) in message
    assert "mapping" in message


def test_a_file_that_is_not_yaml_is_refused(tmp_path: Path) -> None:
    path = config_file(tmp_path, "api: [unclosed\n")
    message = refused(path)
    assert str(path) in message
    assert "YAML" in message


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    message = refused(path)
    assert str(path) in message
    assert "No such file" in message


def test_a_section_given_a_scalar_is_named(tmp_path: Path) -> None:
    assert "api:" in refused(config_file(tmp_path, "api: http://x\n"))


def test_a_key_set_below_a_scalar_is_named(tmp_path: Path) -> None:
    path = config_file(tmp_path, "mtu: 1500\n")
    message = refused(path, overrides={"mtu.value": "1"})
    assert "mtu.value: mtu is not a section" in message
    assert "mtu:" in refused(overrides={"mtu.value": "1"})


def test_an_unknown_environment_variable_is_named_as_such_not_blamed_on_the_file(
    tmp_path: Path,
) -> None:
    path = config_file(tmp_path, "node_ip: 10.0.0.1\n")
    message = refused(path, env={"MESHWIRE_CNI_SOKET": "/x"})
    assert "environment MESHWIRE_CNI_SOKET: cni_soket: unknown key" in message
    assert str(path) not in message


def test_a_bad_value_from_the_environment_names_the_variable(tmp_path: Path) -> None:
    path = config_file(tmp_path, "node_ip: 10.0.0.1\n")
    message = refused(path, env={"MESHWIRE_API__REQUEST_TIMEOUT": "soon"})
    assert "environment MESHWIRE_API__REQUEST_TIMEOUT: api.request_timeout:" in message


def test_a_bad_command_line_value_is_named_as_such(tmp_path: Path) -> None:
    path = config_file(tmp_path, "node_ip: 10.0.0.1\n")
    message = refused(path, env={}, overrides={"workers": "many"})
    assert "command line: workers:" in message
    assert str(path) not in message


def test_every_bad_key_is_reported_at_once(tmp_path: Path) -> None:
    message = refused(config_file(tmp_path, "mtu: big\nlog:\n  level: loud\nextra: 1\n"))
    assert "mtu:" in message
    assert "log.level:" in message
    assert "extra: unknown key" in message


@pytest.mark.parametrize("pair", ["api.url", "=value", ""])
def test_a_set_pair_without_key_and_equals_is_refused(pair: str) -> None:
    with pytest.raises(ConfigError, match="--set"):
        parse_overrides([pair])
