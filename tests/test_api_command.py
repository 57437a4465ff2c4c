"""`meshwire api serve` and `meshwire apply` as a user runs them: two processes,
the server printing its URL, a clean stop on SIGTERM with the data kept."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api_helpers import FIXTURES, private_loopback

MESHWIRE = [sys.executable, "-m", "meshwire.tools.cli"]


@pytest.fixture
def loopback() -> Iterator[str]:
    with private_loopback() as name:
        yield name


def serve(db: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*MESHWIRE, "api", "serve", "--db", str(db), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(process: subprocess.Popen[str]) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(timeout=15)


def meshwire(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MESHWIRE, *argv], capture_output=True, text=True, timeout=60)


@pytest.mark.usefixtures("loopback")
def test_serve_apply_stop_and_serve_again(tmp_path: Path) -> None:
    db = tmp_path / "topologies.db"
    fixture = str(FIXTURES / "2node.yml")
    server = serve(db)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        applied = meshwire("apply", "-f", fixture, "--server", url)
    finally:
        code = stop(server)
    assert code == 0
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.splitlines() == [
        "topology.networkop.co.uk/r1 created",
        "topology.networkop.co.uk/r2 created",
        "topology.networkop.co.uk/r3 created",
    ]

    again = serve(db)
    try:
        assert again.stdout is not None
        reapplied = meshwire("apply", "-f", fixture, "--server", again.stdout.readline().strip())
    finally:
        stop(again)
    assert reapplied.stdout.splitlines() == [
        "topology.networkop.co.uk/r1 unchanged",
        "topology.networkop.co.uk/r2 unchanged",
        "topology.networkop.co.uk/r3 unchanged",
    ]


def test_a_malformed_listen_address_is_refused(tmp_path: Path) -> None:
    result = meshwire("api", "serve", "--db", str(tmp_path / "db"), "--listen", "nowhere")
    assert result.returncode == 2
    assert "--listen: expected HOST:PORT, got 'nowhere'" in result.stderr
