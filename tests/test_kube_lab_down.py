"""`lab down` of a `lab up --kubeconfig` lab while the API server cannot be reached:
everything on the machine goes, the lab directory stays and the error says to run
`down` again; run again once the server answers, it deletes the lab's objects."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab_helpers import host_netns_names, pid_alive, unique_lab

from tests.kube_cluster import ControlPlane, free_address
from tests.kube_helpers import (
    admin,
    finish_namespace_deletion,
    install_crd,
    topologies,
    uninstall_crd,
)
from tests.paths import MESHNET, REPO

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def crd(kube: ControlPlane) -> Iterator[None]:
    api = admin(kube)
    install_crd(api, REPO / "deploy" / "crd.yaml")
    try:
        yield
    finally:
        uninstall_crd(api)
        finish_namespace_deletion(api, "meshwire")
        api.close()


def test_down_with_the_server_unreachable_keeps_the_lab_directory_and_can_be_repeated(
    kube: ControlPlane, crd: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "user.kubeconfig"
    kubeconfig.write_text(kube.admin_kubeconfig.read_text())
    with unique_lab(tmp_path, (MESHNET / "3node.yml").read_text()) as lab:
        assert lab.run("up", str(lab.file), "--nodes", "2", "--kubeconfig", str(kubeconfig)) == 0
        pids = [p["pid"] for p in json.loads((lab.directory / "state.json").read_text())[
            "processes"]]  # fmt: skip
        # The user's kubeconfig now names a port where nothing listens.
        host, (port, _, _) = free_address()
        kube.admin_kubeconfig_for(kubeconfig, f"https://{host}:{port}")
        capsys.readouterr()

        assert lab.run("down") == 1
        err = capsys.readouterr().err
        assert "cannot reach the API server" in err
        assert "run `meshwire lab down` again" in err
        assert [pid for pid in pids if pid_alive(pid)] == []
        assert host_netns_names(lab.prefix) == []
        assert lab.directory.exists()
        assert sorted(topologies(admin(kube), "default")) == ["r1", "r2", "r3"]

        kubeconfig.write_text(kube.admin_kubeconfig.read_text())
        assert lab.run("down") == 0
        assert topologies(admin(kube), "default") == {}
        assert not lab.directory.exists()


def test_up_right_after_down_names_the_namespace_still_terminating_then_works(
    kube: ControlPlane, crd: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # This control plane runs no namespace controller: `down`'s deletion of the
    # `meshwire` namespace never finishes by itself, as on KNE's test clusters.
    api = admin(kube)
    finish_namespace_deletion(api, "meshwire")  # an earlier lab's `down`, finished
    with unique_lab(tmp_path, (MESHNET / "3node.yml").read_text()) as lab:
        argv = ("up", str(lab.file), "--nodes", "2", "--kubeconfig", str(kube.admin_kubeconfig))
        assert lab.run(*argv) == 0
        assert lab.run("down") == 0
        capsys.readouterr()

        assert lab.run(*argv) == 1
        err = capsys.readouterr().err
        assert "namespace meshwire has been terminating" in err
        assert "/api/v1/namespaces/meshwire/finalize" in err
        assert "404" not in err
        assert not lab.directory.exists()  # it stopped before making anything

        finish_namespace_deletion(api, "meshwire")
        assert lab.run(*argv) == 0
        capsys.readouterr()
        assert lab.run("check") == 0, capsys.readouterr().out
        assert lab.run("down") == 0
    finish_namespace_deletion(api, "meshwire")
    api.close()
