"""`meshwire lab down` leaves nothing behind: after `up`, after a failed `up`, twice in a row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab_helpers import Lab, StubRuntime, host_link_names, host_netns_names, pid_alive, unique_lab

from meshwire.tools.lab import netns

pytestmark = pytest.mark.root


def up(lab: Lab, runtime: StubRuntime, *extra: str) -> int:
    return lab.run("up", str(lab.file), "--nodes", "2", "--wait", "0", *extra, runtime=runtime)


def recorded_pids(lab: Lab) -> list[int]:
    state = json.loads((lab.directory / "state.json").read_text())
    return [p["pid"] for p in state["processes"]]


def assert_nothing_left(lab: Lab, pids: list[int]) -> None:
    assert host_netns_names(lab.prefix) == []
    assert host_link_names(lab.prefix) == []
    assert [pid for pid in pids if pid_alive(pid)] == []
    assert not lab.directory.exists()


def test_down_after_up_removes_namespaces_processes_and_files(tmp_path: Path) -> None:
    with unique_lab(tmp_path) as lab:
        assert up(lab, StubRuntime(tmp_path)) == 0
        pids = recorded_pids(lab)
        assert len(pids) >= 3  # the API and one daemon per node
        assert all(pid_alive(pid) for pid in pids)
        assert len(host_netns_names(lab.prefix)) == 1 + 2 + 3  # hub, nodes, pods

        assert lab.run("down") == 0

        assert_nothing_left(lab, pids)


def test_down_after_a_failed_up_removes_what_up_had_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with unique_lab(tmp_path) as lab:
        # The CNI shim fails: nodes, daemons and the first pod exist when up stops.
        assert up(lab, StubRuntime(tmp_path, cni="false")) == 1
        assert "pod default/r1: CNI ADD on node1" in capsys.readouterr().err
        pids = recorded_pids(lab)
        assert host_netns_names(lab.prefix) != []

        assert lab.run("down") == 0

        assert_nothing_left(lab, pids)


class FailingApply(StubRuntime):
    """The API refuses the topology: apply says why on stderr and exits 1."""

    def apply_argv(
        self,
        path: Path,
        server: str,
        kubeconfig: Path | None = None,
        token_file: Path | None = None,
    ) -> list[str]:
        return ["sh", "-c", "sleep 0.5; echo 'topology r9: refused' >&2; exit 1"]


def test_a_failed_apply_stops_up_before_any_add_and_down_removes_what_up_had_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The apply runs while the nodes, daemons and namespaces are made; its failure
    # still stops up, with the API's words, before any pod is added.
    added = tmp_path / "added"
    shim = tmp_path / "shim"
    shim.write_text(f"#!/bin/sh\ntouch {added}\n")
    shim.chmod(0o755)
    with unique_lab(tmp_path) as lab:
        assert up(lab, FailingApply(tmp_path, cni=str(shim))) == 1
        err = capsys.readouterr().err
        assert "apply " in err and "topology r9: refused" in err
        assert not added.exists()
        pids = recorded_pids(lab)
        assert len(host_netns_names(lab.prefix)) == 1 + 2 + 3  # hub, nodes, pods

        assert lab.run("down") == 0

        assert_nothing_left(lab, pids)


def test_down_twice_is_harmless_and_the_second_finds_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with unique_lab(tmp_path) as lab:
        assert up(lab, StubRuntime(tmp_path)) == 0
        pids = recorded_pids(lab)
        assert lab.run("down") == 0
        capsys.readouterr()

        assert lab.run("down") == 0

        assert "nothing to remove" in capsys.readouterr().out
        assert_nothing_left(lab, pids)


def test_down_removes_a_namespace_made_after_the_last_state_write(tmp_path: Path) -> None:
    # A crash between creating a namespace and recording it: the prefix still finds it.
    with unique_lab(tmp_path) as lab:
        assert up(lab, StubRuntime(tmp_path)) == 0
        pids = recorded_pids(lab)
        netns.create(f"{lab.prefix}default.late")

        assert lab.run("down") == 0

        assert_nothing_left(lab, pids)


def test_up_refuses_a_directory_that_already_holds_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with unique_lab(tmp_path) as lab:
        lab.directory.mkdir()
        (lab.directory / "precious").write_text("not the lab's")

        assert up(lab, StubRuntime(tmp_path)) == 1

        assert "already holds files" in capsys.readouterr().err
        assert host_netns_names(lab.prefix) == []
        assert lab.run("down") == 0
        assert (lab.directory / "precious").exists()
