"""A vxlan node without the cluster credentials runs a local-only wire stack; a
grpc node does not start."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml
from wire_helpers import grpc_row

from meshwire.control.auth.certs import CredentialError
from meshwire.control.common.config import load_config
from meshwire.control.daemon.app import _wire_stack
from meshwire.control.links.driver_errors import SpecError
from meshwire.control.tables.links import new_links_table


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


def test_a_vxlan_node_without_credentials_runs_a_local_only_wire_stack(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stack = _wire_stack(load_config(config(tmp_path, "vxlan")), new_links_table())
    assert stack.local and stack.credentials is None
    assert "auth.wire_key" in stack.missing
    assert "auth.wire_key" in caplog.text and "local only" in caplog.text
    # The workers' streams need a key that only this stack holds: nobody's is accepted.
    private = Path(stack.pool.settings.wire_key)
    assert private.stat().st_mode & 0o077 == 0

    async def refused() -> None:
        stack.bind()
        try:
            # A cross-node row is refused before any kernel step, naming the key.
            row = grpc_row(1, "r1", "r2", "127.0.0.2")
            with pytest.raises(SpecError, match=r"another node \(127\.0\.0\.2\).*auth\.wire_key"):
                await asyncio.to_thread(stack.driver.update, row)
        finally:
            await stack.close()

    asyncio.run(refused())
    assert not private.exists()


def test_a_grpc_node_without_credentials_does_not_start(tmp_path: Path) -> None:
    with pytest.raises(CredentialError, match=r"auth\.wire_key"):
        _wire_stack(load_config(config(tmp_path, "grpc")), new_links_table())


def test_with_a_run_directory_the_local_only_key_is_kept_for_the_next_daemon(
    tmp_path: Path,
) -> None:
    # The workers outlive the daemon and are adopted only by a daemon of their own
    # config: the next one must hand them the same key file.
    path = config(tmp_path, "vxlan")
    settings = yaml.safe_load(path.read_text())
    settings["dataplane"] = {"run_dir": str(tmp_path / "workers")}
    path.write_text(yaml.safe_dump(settings))

    keys = []
    for _ in range(2):
        stack = _wire_stack(load_config(path), new_links_table())
        assert stack.local
        keys.append(Path(stack.pool.settings.wire_key))
        asyncio.run(stack.close())

    assert keys[0] == keys[1] and keys[0].parent == tmp_path / "workers"
    assert keys[0].stat().st_mode & 0o077 == 0 and keys[0].read_text().strip()
