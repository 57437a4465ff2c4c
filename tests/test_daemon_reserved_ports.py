"""The daemon adds its listen ports to `net.ipv4.ip_local_reserved_ports`, keeping
every entry others made; here against a file standing in for the sysctl."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from meshwire.control.common.config import load_config
from meshwire.control.daemon.reserved_ports import listen_ports, missing, parse, render, reserve


def ports_of(**overrides: str) -> list[int]:
    return listen_ports(load_config(None, env={}, overrides={"node_ip": "10.0.0.1", **overrides}))


def test_every_daemon_listens_on_metrics_peer_and_one_port_per_worker() -> None:
    # A vxlan node runs the wire too: links under emulation are carried by its workers.
    for kind in ("vxlan", "grpc"):
        wire = {"inter_node_link_type": kind, "workers": "3"}
        assert ports_of(**wire) == [51100, 51111, 51112, 51113, 51114]
    zero = {"metrics.listen": "127.0.0.1:0", "peer.listen": "127.0.0.1:0", "workers": "1"}
    assert ports_of(**zero) == [51112]
    grpc = {"inter_node_link_type": "grpc", "workers": "3"}
    assert ports_of(**grpc, **{"peer.listen": "[::1]:7000", "dataplane.port_base": "7001"}) == [
        7000,
        7001,
        7002,
        7003,
        51100,
    ]


def test_the_sysctl_value_reads_and_writes_as_ports_and_ranges() -> None:
    assert parse("") == [] and parse("\n") == []
    assert parse("1000,2000-2005\n") == [(1000, 1000), (2000, 2005)]
    assert render([51113, 51100, 51111, 51112, 51100]) == "51100,51111-51113"
    assert render([]) == ""
    with pytest.raises(ValueError):
        parse("51100;51111")


def test_only_ports_not_yet_covered_are_missing() -> None:
    assert missing("51000-51200", [51100, 51111]) == []
    assert missing("51100", [51100, 51111, 51112]) == [51111, 51112]


def test_reserving_adds_what_is_missing_and_keeps_every_other_entry(tmp_path: Path) -> None:
    sysctl = tmp_path / "ip_local_reserved_ports"
    sysctl.write_text("8080,40000-40002\n")
    assert reserve([51100, 51111, 51112], sysctl) == [51100, 51111, 51112]
    assert sysctl.read_text() == "8080,40000-40002,51100,51111-51112"
    # A restarted daemon finds its ports reserved and writes nothing.
    written = sysctl.stat().st_mtime_ns
    assert reserve([51100, 51111, 51112], sysctl) == []
    assert sysctl.stat().st_mtime_ns == written
    assert sysctl.read_text() == "8080,40000-40002,51100,51111-51112"


def test_a_sysctl_that_cannot_be_written_is_logged_and_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    absent = tmp_path / "no" / "such" / "sysctl"
    caplog.set_level(logging.WARNING, logger="meshwire.control.daemon.reserved_ports")
    assert reserve([51100], absent) == []
    assert f"cannot reserve ports 51100 in {absent}" in caplog.text
