"""Pods restart and move like a runtime would do it; a killed daemon is started again."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_helpers import Lab, StubRuntime, pid_alive, unique_lab

from meshwire.tools.lab.lab_names import netns_path

pytestmark = pytest.mark.root


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    with unique_lab(tmp_path) as lab:
        rc = lab.run("up", str(lab.file), "--wait", "0", runtime=StubRuntime(tmp_path))
        assert rc == 0
        yield lab


def state(lab: Lab) -> dict[str, Any]:
    saved: dict[str, Any] = json.loads((lab.directory / "state.json").read_text())
    return saved


def test_restart_pod_gives_a_new_container_id_and_a_new_namespace(lab: Lab, tmp_path: Path) -> None:
    before = state(lab)["pods"]["default/r1"]
    inode = os.stat(netns_path(before["netns"])).st_ino

    assert lab.run("restart-pod", "r1", "--wait", "0", runtime=StubRuntime(tmp_path)) == 0

    after = state(lab)["pods"]["default/r1"]
    assert after["container_id"] and after["container_id"] != before["container_id"]
    assert after["node"] == before["node"]
    assert os.stat(netns_path(after["netns"])).st_ino != inode


def sandbox(lab: Lab, pod: dict[str, Any]) -> Path:
    return lab.directory / "sandboxes" / f"default.{pod['name']}.{pod['container_id'][:12]}"


def test_each_sandbox_has_its_own_netns_path_and_a_restart_retires_the_old_one(
    lab: Lab, tmp_path: Path
) -> None:
    before = state(lab)["pods"]["default/r1"]
    old = sandbox(lab, before)
    assert os.stat(old).st_ino == os.stat(netns_path(before["netns"])).st_ino

    assert lab.run("restart-pod", "r1", "--wait", "0", runtime=StubRuntime(tmp_path)) == 0

    after = state(lab)["pods"]["default/r1"]
    assert not os.path.lexists(old), "a late CNI call for the old sandbox would reach the new one"
    assert os.stat(sandbox(lab, after)).st_ino == os.stat(netns_path(after["netns"])).st_ino


def test_move_pod_puts_it_on_the_other_node(lab: Lab, tmp_path: Path) -> None:
    assert lab.run("move-pod", "r1", "node2", "--wait", "0", runtime=StubRuntime(tmp_path)) == 0

    assert state(lab)["pods"]["default/r1"]["node"] == "node2"


def test_move_pod_to_an_unknown_node_is_refused(
    lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert lab.run("move-pod", "r1", "node9", "--wait", "0", runtime=StubRuntime(tmp_path)) == 1

    assert "node 'node9' is not one of node1, node2" in capsys.readouterr().err


def test_kill_daemon_replaces_the_process_and_down_still_stops_both(
    lab: Lab, tmp_path: Path
) -> None:
    old = next(p for p in state(lab)["processes"] if p["role"] == "daemon/node2")["pid"]

    assert lab.run("kill-daemon", "node2", runtime=StubRuntime(tmp_path)) == 0

    daemons = [p["pid"] for p in state(lab)["processes"] if p["role"] == "daemon/node2"]
    assert daemons[0] == old and not pid_alive(old)
    assert pid_alive(daemons[-1])
    assert lab.run("down") == 0
    assert not pid_alive(daemons[-1])


def test_kill_api_replaces_the_api_on_its_address_and_down_still_stops_both(
    lab: Lab, tmp_path: Path
) -> None:
    before = state(lab)
    old = next(p for p in before["processes"] if p["role"] == "api")["pid"]

    assert lab.run("kill-api", runtime=StubRuntime(tmp_path)) == 0

    after = state(lab)
    apis = [p for p in after["processes"] if p["role"] == "api"]
    assert apis[0]["pid"] == old and not pid_alive(old)
    assert pid_alive(apis[-1]["pid"])
    assert apis[-1]["argv"] == apis[0]["argv"]  # same database, same address
    assert after["api_port"] == before["api_port"]
    assert lab.run("down") == 0
    assert not pid_alive(apis[-1]["pid"])


def hub_port_up(lab: Lab, node_index: int) -> bool:
    out = subprocess.run(
        ["ip", "-n", f"{lab.prefix}hub", "-j", "link", "show", f"{lab.prefix}h{node_index}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return "UP" in json.loads(out)[0]["flags"]


def test_partition_cuts_the_node_off_for_the_time_given_and_plugs_it_back(lab: Lab) -> None:
    seen: list[bool] = []
    watcher = threading.Thread(target=lambda: (time.sleep(0.3), seen.append(hub_port_up(lab, 2))))
    watcher.start()
    assert lab.run("partition", "node2", "--seconds", "1") == 0
    watcher.join()
    assert seen == [False]
    assert hub_port_up(lab, 2) and hub_port_up(lab, 1)


@pytest.mark.parametrize(
    ("words", "error"),
    [
        (("node9",), "node 'node9' is not one of node1, node2"),
        (("node1", "--seconds", "0"), "give 0 < seconds <= 600"),
    ],
)
def test_a_partition_of_an_unknown_node_or_no_time_is_refused(
    lab: Lab, capsys: pytest.CaptureFixture[str], words: tuple[str, ...], error: str
) -> None:
    assert lab.run("partition", *words) == 1
    assert error in capsys.readouterr().err
    assert hub_port_up(lab, 1)
