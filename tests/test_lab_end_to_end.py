"""The default `meshwire lab` path with the real API, daemons and CNI shim: up, check, down."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab_helpers import host_link_names, host_netns_names, pid_alive, unique_lab

pytestmark = pytest.mark.root


def test_a_lab_file_comes_up_every_link_carries_traffic_and_down_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with unique_lab(tmp_path) as lab:
        assert lab.run("up", str(lab.file), "--nodes", "2", "--wait", "60") == 0
        pids = [
            p["pid"] for p in json.loads((lab.directory / "state.json").read_text())["processes"]
        ]
        capsys.readouterr()

        assert lab.run("check") == 0
        out = capsys.readouterr().out
        assert "ok   default/1 vxlan arp default/r1:eth1 -- default/r2:eth1" in out
        assert "ok   default/2 veth frame default/r1:eth2 -- default/r3:eth1" in out

        assert lab.run("status", "--json") == 0
        status = json.loads(capsys.readouterr().out)
        assert {p["pod"]: p["src_ip"] for p in status["pods"]} == {
            "default/r1": "169.254.0.11",
            "default/r2": "169.254.0.12",
            "default/r3": "169.254.0.11",
        }
        assert [k["state"] for k in status["links"]] == ["up", "up"]

        assert lab.run("down") == 0
        assert host_netns_names(lab.prefix) == []
        assert host_link_names(lab.prefix) == []
        assert [pid for pid in pids if pid_alive(pid)] == []
        assert not lab.directory.exists()
