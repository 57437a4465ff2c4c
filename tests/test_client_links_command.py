"""`meshwire links`: the daemon's /links as a table, found from the config, errors named."""

from __future__ import annotations

import dataclasses
import http.server
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from links_helpers import grpc_row, veth_row

from meshwire.control.daemon.link_report import link_report
from meshwire.control.model.emulation import Impairments
from meshwire.control.tables.health import Health
from meshwire.tools.cli import main as meshwire
from meshwire.tools.client import links_command

VETH = veth_row("/run/netns/a", "/run/netns/b", uid=3, a_intf="eth2")
GRPC = grpc_row("/run/netns/a")
ROWS = [
    (VETH, Health().done()),
    (GRPC, Health().failed("eth1 exists and meshwire did not create it", True)),
]
# What the daemon answers, made as the daemon makes it.
EVERY = link_report(ROWS)
FAILING = link_report(ROWS, "error")


@pytest.fixture
def daemon() -> Iterator[tuple[str, list[str]]]:
    """A stand-in for the daemon's metrics port on loopback; yields its URL and the paths asked."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            if not self.path.startswith("/links"):
                self.send_response(404)
                self.end_headers()
                self.wfile.write(b"not found\n")
                return
            entries = FAILING if self.path.endswith("state=error") else EVERY
            self.send_response(200)
            self.end_headers()
            self.wfile.write(json.dumps(entries).encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


def test_the_table_names_each_end_its_peer_its_state_and_why(
    daemon: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, asked = daemon
    assert meshwire(["links", "--url", url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert asked == ["/links"]
    assert out[0] == "link ends: 2"
    assert out[2].split() == [
        "lab/3", "veth", "lab/r1:eth2", "lab/r2:eth1", "-", "done", "0", "-",
    ]  # fmt: skip
    assert out[3].split()[:8] == [
        "lab/5", "grpc", "lab/r1:eth1", "lab/r2:eth1", "on", "192.0.2.2", "-", "error",
    ]  # fmt: skip
    assert out[3].endswith("(permanent)  1       eth1 exists and meshwire did not create it")


def test_state_and_json_pass_the_daemons_answer_through(
    daemon: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, asked = daemon
    assert meshwire(["links", "--url", url, "--state", "error", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == FAILING
    assert asked == ["/links?state=error"]


def test_the_daemon_is_found_from_the_configs_metrics_listen(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("node_ip: 10.0.0.5\nmetrics: {listen: ':51200'}\n")
    assert links_command.daemon_url(str(config)) == "http://127.0.0.1:51200"
    config.write_text("node_ip: 10.0.0.5\nmetrics: {listen: '[::]:51200'}\n")
    assert links_command.daemon_url(str(config)) == "http://[::1]:51200"
    config.write_text("node_ip: 10.0.0.5\nmetrics: {listen: '10.0.0.5:51200'}\n")
    assert links_command.daemon_url(str(config)) == "http://10.0.0.5:51200"
    assert links_command.daemon_url(None) == "http://127.0.0.1:51100"


def test_an_unreachable_daemon_or_a_bad_config_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    assert meshwire(["links", "--url", f"http://127.0.0.1:{port}"]) == 1
    assert f"cannot reach the daemon at http://127.0.0.1:{port}/links" in capsys.readouterr().err
    config = tmp_path / "config.yaml"
    config.write_text("node_ip: 10.0.0.5\nmetrics: {listen: 51200}\n")
    assert meshwire(["links", "--config", str(config)]) == 2
    assert "metrics.listen" in capsys.readouterr().err


def test_an_error_answer_is_reported_with_the_url_and_the_daemons_words(
    daemon: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = daemon
    assert meshwire(["links", "--url", url + "/elsewhere"]) == 1
    assert f"{url}/elsewhere/links: 404 not found" in capsys.readouterr().err


def free_port() -> int:
    """A loopback port with nothing listening on it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_the_table_shows_each_ends_impairments_and_a_pulled_cable() -> None:
    row = dataclasses.replace(
        GRPC,
        local=dataclasses.replace(GRPC.local, impairments=Impairments(delay_ms=20)),
        peer=dataclasses.replace(GRPC.peer, impairments=Impairments(loss_pct=2.5)),
        down=True,
    )
    text = links_command.render(link_report([(row, Health())]))
    assert "> delay_ms=20; < loss_pct=2.5; cable down" in text
