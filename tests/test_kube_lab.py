"""`meshwire lab up FILE --kubeconfig F`: a lab whose daemons watch a real kube-apiserver.

Under each Topology CRD a cluster may have (meshwire's, KNE's, upstream
meshnet's): the lab comes up with its daemons on ServiceAccount tokens bound
by deploy/rbac.yaml (never the admin's credentials), reaching the server at
the kubeconfig's address from inside their node namespaces; every link
passes `check` before and after a pod restart; `kill-api` says it does not
apply; `down` deletes the lab's Topology objects and the namespaces and RBAC
objects it made, and nothing else.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from lab_helpers import Lab, host_netns_names, pid_alive, unique_lab

from meshwire.control.model.topology import GROUP, PLURAL, VERSION
from tests.kube_cluster import ControlPlane
from tests.kube_helpers import (
    admin,
    finish_namespace_deletion,
    install_crd,
    topologies,
    uninstall_crd,
    unique,
)
from tests.paths import CRDS, MESHNET, REPO

pytestmark = pytest.mark.root

CRD_FILES = {
    "deploy": REPO / "deploy" / "crd.yaml",
    "kne": CRDS / "kne-meshnet.yaml",
    "upstream": CRDS / "meshnet-upstream.yaml",
}
ACCOUNT = "system:serviceaccount:meshwire:meshwire"
ID_CRD = "idallocations.meshwire.dev"


def lab_file(tmp_path: Path, namespace: str) -> str:
    """meshnet's 3node.yml with every object in `namespace` (one the cluster lacks)."""
    data = yaml.safe_load((MESHNET / "3node.yml").read_text())
    for item in data["items"]:
        item["metadata"]["namespace"] = namespace
    return yaml.safe_dump(data)


def test_without_a_topology_crd_up_names_deploy_crd_and_makes_nothing(
    kube: ControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with unique_lab(tmp_path, (MESHNET / "3node.yml").read_text()) as lab:
        assert lab.run("up", str(lab.file), "--kubeconfig", str(kube.admin_kubeconfig)) == 1
        err = capsys.readouterr().err
        assert "serves no topologies.networkop.co.uk/v1beta1" in err
        assert "kubectl apply -f deploy/crd.yaml" in err
        assert not lab.directory.exists()
        assert host_netns_names(lab.prefix) == []


@pytest.fixture(scope="module", params=sorted(CRD_FILES))
def crd(request: pytest.FixtureRequest, kube: ControlPlane) -> Iterator[str]:
    api = admin(kube)
    install_crd(api, CRD_FILES[request.param])
    try:
        yield str(request.param)
    finally:
        uninstall_crd(api)
        api.close()


@pytest.fixture
def api(kube: ControlPlane) -> Iterator[client.ApiClient]:
    api = admin(kube)
    try:
        yield api
    finally:
        api.close()


def up(lab: Lab, kube: ControlPlane) -> None:
    assert lab.run("up", str(lab.file), "--nodes", "2", "--kubeconfig",
                   str(kube.admin_kubeconfig)) == 0  # fmt: skip


def check(lab: Lab, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    code = lab.run("check")
    out = capsys.readouterr().out
    assert code == 0, out
    assert "3/3 links ok" in out
    return out


def audit(kube: ControlPlane, user: str) -> list[dict[str, Any]]:
    events = [json.loads(line) for line in kube.audit_log.read_text().splitlines() if line]
    return [
        e for e in events if e["user"].get("username") == user and e["stage"] == "ResponseComplete"
    ]


def test_a_lab_on_a_real_api_server_works_and_down_removes_what_it_made(
    kube: ControlPlane, crd: str, api: client.ApiClient, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    namespace = unique("mwlab")
    objects = client.CustomObjectsApi(api)
    keep = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Topology",
            "metadata": {"name": "keep"}, "spec": {"links": []}}  # fmt: skip
    objects.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, keep)
    seen_before = len(audit(kube, ACCOUNT))
    try:
        with unique_lab(tmp_path, lab_file(tmp_path, namespace)) as lab:
            up(lab, kube)
            # Each daemon has its own ServiceAccount token, and no client certificate.
            configs = [yaml.safe_load((lab.directory / "nodes" / node / "kubeconfig")
                                      .read_text()) for node in ("node1", "node2")]  # fmt: skip
            users = [c["users"][0]["user"] for c in configs]
            assert [set(u) for u in users] == [{"token"}, {"token"}]
            assert users[0]["token"] != users[1]["token"]
            assert {c["clusters"][0]["cluster"]["server"] for c in configs} == {kube.url}

            check(lab, capsys)
            # Settled, the daemons write nothing more: no status write loops on this CRD.
            writes = patches(kube)
            time.sleep(5)
            assert patches(kube) == writes
            assert lab.run("restart-pod", "r2") == 0
            check(lab, capsys)
            if crd == "deploy":
                assert lab.run("move-pod", "r2", "node1") == 0
                check(lab, capsys)
                assert lab.run("kill-daemon", "node1") == 0
                check(lab, capsys)
                assert lab.run("partition", "node2", "--seconds", "2") == 0
                check(lab, capsys)
            capsys.readouterr()
            assert lab.run("status", "--json") == 0
            status = json.loads(capsys.readouterr().out)
            assert status["api"]["reachable"] is True
            assert all(p["src_ip"].startswith("169.254.0.") for p in status["pods"])
            assert lab.run("kill-api") == 1
            assert "does not apply here" in capsys.readouterr().err

            pids = [p["pid"] for p in json.loads(
                (lab.directory / "state.json").read_text())["processes"]]  # fmt: skip
            assert lab.run("down") == 0
            assert [pid for pid in pids if pid_alive(pid)] == []
            assert host_netns_names(lab.prefix) == []

        calls = audit(kube, ACCOUNT)[seen_before:]
        assert calls, "the daemons made no call on their ServiceAccount"
        decisions = [(e.get("annotations") or {}).get("authorization.k8s.io/decision")
                     for e in calls]  # fmt: skip
        assert set(decisions) == {"allow"}

        assert topologies(api, namespace) == {}
        assert list(topologies(api, "default")) == ["keep"]
        core = client.CoreV1Api(api)
        for made in (namespace, "meshwire"):
            assert gone_or_terminating(core, made)
        with pytest.raises(ApiException) as missing:
            client.RbacAuthorizationV1Api(api).read_cluster_role("meshwire")
        assert missing.value.status == 404
        # The IdAllocation CRD the lab installed goes too (its deletion may still finish).
        try:
            ids = client.ApiextensionsV1Api(api).read_custom_resource_definition(ID_CRD)
            assert ids.metadata.deletion_timestamp is not None
        except ApiException as err:
            assert err.status == 404
    finally:
        objects.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "keep")
        for made in (namespace, "meshwire"):
            finish_namespace_deletion(api, made)


def patches(kube: ControlPlane) -> int:
    """Status writes the daemons made so far."""
    return sum(e["verb"] == "patch" for e in audit(kube, ACCOUNT))


def gone_or_terminating(core: client.CoreV1Api, name: str) -> bool:
    try:
        found = core.read_namespace(name)
    except ApiException as err:
        return err.status == 404
    return found.status.phase == "Terminating"
