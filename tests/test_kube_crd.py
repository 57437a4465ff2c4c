"""meshwire's own CRD (deploy/crd.yaml) on a real kube-apiserver.

Every meshnet fixture applies through `meshwire apply --kubeconfig` and reads
back exactly as the file says (nothing pruned, nothing defaulted), and the
status changes only through the `/status` subresource.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from meshwire.control.model.load import load_file
from meshwire.control.model.topology import GROUP, PLURAL, VERSION, Topology
from tests.kube_cluster import ControlPlane
from tests.kube_helpers import (
    admin,
    create_namespace,
    delete_namespace,
    install_crd,
    topologies,
    uninstall_crd,
    unique,
)
from tests.paths import REPO, meshnet_fixtures

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def api(kube: ControlPlane) -> Iterator[client.ApiClient]:
    api = admin(kube)
    install_crd(api, REPO / "deploy" / "crd.yaml")
    try:
        yield api
    finally:
        uninstall_crd(api)
        api.close()


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    name = create_namespace(api, unique("mw-crd"))
    try:
        yield name
    finally:
        delete_namespace(api, name)


def meshwire(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "meshwire.tools.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("fixture", meshnet_fixtures(), ids=lambda p: p.name)
def test_every_meshnet_fixture_applies_and_reads_back_identical(
    kube: ControlPlane, api: client.ApiClient, fixture: Path
) -> None:
    loaded = load_file(fixture)
    expected = {t.key: t.to_dict()["spec"] for t in loaded}
    for name in sorted({t.namespace for t in loaded}):
        ensure_namespace(api, name)
    kubeconfig = str(kube.admin_kubeconfig)
    applied = meshwire("apply", "-f", str(fixture), "--kubeconfig", kubeconfig)
    try:
        assert applied.returncode == 0, applied.stderr
        assert applied.stdout.count(" created") == len(expected)
        assert applied.stderr == ""

        stored = stored_objects(api, loaded)
        assert {key: obj["spec"] for key, obj in stored.items()} == expected

        again = meshwire("apply", "-f", str(fixture), "--kubeconfig", kubeconfig)
        assert again.returncode == 0, again.stderr
        assert again.stdout.count(" unchanged") == len(expected)
        # The second apply changed nothing on the server either.
        versions = {k: o["metadata"]["resourceVersion"] for k, o in stored.items()}
        assert {
            k: o["metadata"]["resourceVersion"] for k, o in stored_objects(api, loaded).items()
        } == versions
    finally:
        deleted = meshwire("delete", "-f", str(fixture), "--kubeconfig", kubeconfig)
        assert deleted.returncode == 0, deleted.stderr
    assert stored_objects(api, loaded) == {}


def ensure_namespace(api: client.ApiClient, name: str) -> None:
    try:
        create_namespace(api, name)
    except ApiException as err:
        if err.status != 409:
            raise


def stored_objects(api: client.ApiClient, loaded: list[Topology]) -> dict[str, dict[str, Any]]:
    """The server's objects in the namespaces of `loaded`, by `ns/name`."""
    out = {}
    for name in {t.namespace for t in loaded}:
        out.update({f"{name}/{n}": obj for n, obj in topologies(api, name).items()})
    return out


def test_status_changes_only_through_the_status_subresource(
    kube: ControlPlane, api: client.ApiClient, namespace: str
) -> None:
    objects = client.CustomObjectsApi(api)
    target = (GROUP, VERSION, namespace, PLURAL)
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Topology",
        "metadata": {"name": "r1"},
        "spec": {
            "links": [{"uid": 1, "peer_pod": "r2", "local_intf": "eth1", "peer_intf": "eth1"}]
        },
        "status": {"src_ip": "10.0.0.9"},
    }
    created = objects.create_namespaced_custom_object(*target, body)
    assert "status" not in created or not created["status"]

    objects.patch_namespaced_custom_object(*target, "r1", {"status": {"src_ip": "10.0.0.8"}})
    assert not objects.get_namespaced_custom_object(*target, "r1").get("status")

    status = {
        "src_ip": "10.0.0.7",
        "net_ns": "/run/netns/x",
        "container_id": "c1",
        "plumbing_error": "",
    }
    written = objects.patch_namespaced_custom_object_status(
        *target, "r1", {"status": status, "spec": {"links": []}}
    )
    assert written["status"] == status
    # The spec part of a /status write is ignored.
    assert written["spec"] == body["spec"]
    assert objects.get_namespaced_custom_object(*target, "r1")["status"] == status


def test_graph_draws_a_namespace_from_the_real_servers_topologies(
    kube: ControlPlane, api: client.ApiClient, tmp_path: Path
) -> None:
    fixture = REPO / "tests" / "data" / "meshnet" / "3node.yml"
    loaded = load_file(fixture)
    ensure_namespace(api, "default")
    kubeconfig = str(kube.admin_kubeconfig)
    applied = meshwire("apply", "-f", str(fixture), "--kubeconfig", kubeconfig)
    try:
        assert applied.returncode == 0, applied.stderr
        out = tmp_path / "lab.json"
        done = meshwire("graph", "--kubeconfig", kubeconfig, "-n", "default", "-o", str(out))
        assert done.returncode == 0, done.stderr
        graph = json.loads(out.read_text())
        assert sorted(p["id"] for p in graph["pods"]) == sorted(t.key for t in loaded)
        uids = {f"default/{link.uid}" for t in loaded for link in t.links}
        # No pod runs here (no status): every link is drawn, none placed.
        assert {k["id"]: k["state"] for k in graph["links"]} == dict.fromkeys(uids, "unplaced")
    finally:
        deleted = meshwire("delete", "-f", str(fixture), "--kubeconfig", kubeconfig)
        assert deleted.returncode == 0, deleted.stderr
