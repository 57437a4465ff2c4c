"""A vxlan node starts without the cluster credentials; a grpc node does not."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from meshwire.control.auth.certs import CredentialError
from meshwire.control.common.config import load_config
from meshwire.control.daemon.app import _wire_stack


def config(tmp_path: Path, link_type: str) -> Path:
    missing = tmp_path / "no-such-dir"
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "node_name": "n1",
                "node_ip": "127.0.0.1",
                "inter_node_link_type": link_type,
                "auth": {
                    "ca_cert": str(missing / "ca.crt"),
                    "ca_key": str(missing / "ca.key"),
                    "wire_key": str(missing / "wire.key"),
                },
            }
        )
    )
    return path


def test_a_vxlan_node_without_credentials_runs_without_a_wire_stack(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert _wire_stack(load_config(config(tmp_path, "vxlan"))) is None
    assert "auth.wire_key" in caplog.text and "emulation" in caplog.text


def test_a_grpc_node_without_credentials_does_not_start(tmp_path: Path) -> None:
    with pytest.raises(CredentialError, match=r"auth\.wire_key"):
        _wire_stack(load_config(config(tmp_path, "grpc")))
