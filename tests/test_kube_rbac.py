"""The daemon on a ServiceAccount token bound by exactly deploy/rbac.yaml, on a real
kube-apiserver with RBAC: every call it makes is allowed (the server's audit log
says so), a permission taken away is named by /readyz, and in-cluster config
(the standard token, CA and namespace files, `KUBERNETES_SERVICE_HOST/PORT`)
works, a rotated token file included.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, utils
from kubernetes.client.exceptions import ApiException

from meshwire.control.daemon.node_watch import LINK_TYPE
from meshwire.control.model.topology import GROUP, PLURAL, VERSION
from tests.kube_cluster import ControlPlane, free_address
from tests.kube_helpers import (
    DaemonProcess,
    admin,
    create_namespace,
    finish_namespace_deletion,
    install_crd,
    service_account_token,
    uninstall_crd,
    unique,
    wait_for,
)
from tests.paths import REPO

pytestmark = pytest.mark.root

RBAC = REPO / "deploy" / "rbac.yaml"
ID_CRD = REPO / "deploy" / "crd-idallocations.yaml"
ACCOUNT = "system:serviceaccount:meshwire:meshwire"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@pytest.fixture(scope="module")
def api(kube: ControlPlane) -> Iterator[client.ApiClient]:
    """deploy/'s two CRDs, the `meshwire` namespace and deploy/rbac.yaml's objects as they
    are."""
    api = admin(kube)
    install_crd(api, REPO / "deploy" / "crd.yaml")
    install_crd(api, ID_CRD)
    create_namespace(api, "meshwire")
    utils.create_from_yaml(api, str(RBAC))
    try:
        yield api
    finally:
        rbac = client.RbacAuthorizationV1Api(api)
        for delete in (
            lambda: rbac.delete_cluster_role_binding("meshwire"),
            lambda: rbac.delete_cluster_role("meshwire"),
            lambda: finish_namespace_deletion(api, "meshwire"),
        ):
            try:
                delete()
            except ApiException as err:
                if err.status != 404:
                    raise
        uninstall_crd(api)
        uninstall_crd(api, yaml.safe_load(ID_CRD.read_text())["metadata"]["name"])
        api.close()


@pytest.fixture
def namespace(api: client.ApiClient) -> str:
    # Deleted with the CRD's objects when the module's fixture removes the CRD.
    return create_namespace(api, unique("mw-rbac"))


@pytest.fixture
def token_config(kube: ControlPlane, api: client.ApiClient, tmp_path: Path) -> Path:
    token = service_account_token(api, "meshwire", "meshwire")
    return kube.kubeconfig_for_token(tmp_path / "sa.kubeconfig", token)


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[list[DaemonProcess]]:
    started: list[DaemonProcess] = []
    try:
        yield started
    finally:
        for daemon in started:
            daemon.stop()


def start_daemon(
    kube: ControlPlane, folder: Path, config: dict[str, Any], started: list[DaemonProcess],
    settings: dict[str, Any] | None = None, **kwargs: Any,
) -> DaemonProcess:  # fmt: skip
    """`config`: its `api` keys; `settings`: other keys of its config."""
    _, (port, _, _) = free_address()
    daemon = DaemonProcess(
        folder, kube.host, port, {"api": {"watch_timeout": 5, **config}, **(settings or {})},
        **kwargs,
    )  # fmt: skip
    started.append(daemon)
    return daemon


def stale_placement(api: client.ApiClient, namespace: str, name: str, node_ip: str) -> None:
    """A Topology whose status places its pod on the daemon's node in a sandbox the
    running daemon never added: the daemon clears it (a conditional write: a read of /status, then a
    patch), so a test sees every kind of call the daemon makes."""
    objects = client.CustomObjectsApi(api)
    objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Topology", "metadata": {"name": name},
        "spec": {"links": [{"uid": 1, "peer_pod": "x", "local_intf": "eth1",
                            "peer_intf": "eth1"}]}})  # fmt: skip
    objects.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name,
        {"status": {"src_ip": node_ip, "net_ns": "/run/netns/gone",
                    "container_id": "gone"}},
    )  # fmt: skip


def cleared(api: client.ApiClient, namespace: str, name: str) -> bool:
    status = (
        client.CustomObjectsApi(api)
        .get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        .get("status")
        or {}
    )
    return status.get("container_id") == "" and status.get("src_ip") == ""


def granted() -> set[tuple[str, str]]:
    """(resource, verb) pairs deploy/rbac.yaml's ClusterRole grants."""
    role = next(o for o in yaml.safe_load_all(RBAC.read_text()) if o["kind"] == "ClusterRole")
    return {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}


def audit(kube: ControlPlane, user: str) -> list[dict[str, Any]]:
    """The audit events of `user`'s requests that completed."""
    events = [json.loads(line) for line in kube.audit_log.read_text().splitlines() if line]
    return [
        e for e in events
        if e["user"].get("username") == user and e["stage"] == "ResponseComplete"
    ]  # fmt: skip


def test_every_call_the_daemon_makes_on_its_service_account_is_allowed(
    kube: ControlPlane, api: client.ApiClient, namespace: str, token_config: Path,
    daemons: list[DaemonProcess], tmp_path: Path,
) -> None:  # fmt: skip
    node = unique("mw-rbac-node")
    core = client.CoreV1Api(api)
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    try:
        daemon = start_daemon(
            kube, tmp_path / "d", {"kubeconfig": str(token_config), "follow_nodes": True},
            daemons, settings={"node_name": node},
        )  # fmt: skip
        daemon.wait_readyz("the daemon ready", lambda code, _: code == 200)
        stale_placement(api, namespace, "r1", daemon.node_ip)
        wait_for("the stale placement cleared", lambda: cleared(api, namespace, "r1"))
        # It writes its link type on its Node.
        wait_for("its Node annotated", lambda: LINK_TYPE in (
            core.read_node(node).metadata.annotations or {}))  # fmt: skip
    finally:
        core.delete_node(node)
    # Its watches end every 5 s: let one be reopened too.
    wait_for("a second watch", lambda: sum(
        e["verb"] == "watch" for e in audit(kube, ACCOUNT)) >= 2)  # fmt: skip

    calls = audit(kube, ACCOUNT)
    # Authorized by RBAC, each: the server's own verdict, as its audit log records it.
    refused = [
        (e["verb"], e["requestURI"], e["responseStatus"]["code"])
        for e in calls
        if (e.get("annotations") or {}).get("authorization.k8s.io/decision") != "allow"
    ]
    assert refused == []  # fmt: skip
    made = {
        (e["objectRef"]["resource"] + ("/" + e["objectRef"]["subresource"]
                                       if e["objectRef"].get("subresource") else ""), e["verb"])
        for e in calls
    }  # fmt: skip
    assert made <= granted()
    assert {("topologies", "list"), ("topologies", "watch"), ("topologies/status", "get"),
            ("topologies/status", "patch"), ("nodes", "list"), ("nodes", "watch"),
            ("nodes/status", "patch")} <= made  # fmt: skip


@pytest.mark.parametrize(
    ("rule", "verb", "named"),
    [
        (0, "list", 'cannot list resource "topologies"'),
        (0, "watch", 'cannot watch resource "topologies"'),
        (1, "patch", 'cannot patch resource "topologies/status"'),
    ],
)
def test_a_permission_removed_is_named_by_readyz(
    kube: ControlPlane, api: client.ApiClient, namespace: str, token_config: Path,
    daemons: list[DaemonProcess], tmp_path: Path, rule: int, verb: str, named: str,
) -> None:  # fmt: skip
    rbac = client.RbacAuthorizationV1Api(api)
    whole = yaml.safe_load_all(RBAC.read_text())
    role = next(o for o in whole if o["kind"] == "ClusterRole")
    role["rules"][rule]["verbs"].remove(verb)
    original = rbac.read_cluster_role("meshwire")
    rbac.patch_cluster_role("meshwire", {"rules": role["rules"]})
    try:
        daemon = start_daemon(kube, tmp_path / "d", {"kubeconfig": str(token_config)}, daemons)
        if verb == "patch":
            daemon.wait_readyz("the daemon ready", lambda code, _: code == 200)
            stale_placement(api, namespace, "r1", daemon.node_ip)
        body = daemon.wait_readyz(f"/readyz naming {verb}", lambda code, text: code == 503
                                  and named in text)  # fmt: skip
        assert "deploy/rbac.yaml" in body
        assert ACCOUNT.split(":")[-1] in body
    finally:
        rbac.patch_cluster_role("meshwire", {"rules": original.rules})
    # Given back, the permission is used: the daemon becomes ready without a restart.
    daemon.wait_readyz("the daemon ready again", lambda code, _: code == 200)


def test_in_cluster_config_from_the_standard_files_and_a_rotated_token(
    kube: ControlPlane, api: client.ApiClient, namespace: str, daemons: list[DaemonProcess],
    tmp_path: Path,
) -> None:  # fmt: skip
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "ca.crt").write_bytes(kube.ca_file.read_bytes())
    (account / "namespace").write_text("meshwire")
    (account / "token").write_text(service_account_token(api, "meshwire", "meshwire"))
    # The daemon's own mount namespace: a fresh /run holding only the token folder, as
    # kubelet mounts it into a pod; nothing of it reaches the host's mounts.
    script = (
        "mount --make-rprivate / && mount -t tmpfs mw-run /run && "
        f"mkdir -p {SA_DIR} && mount --bind {shlex.quote(str(account))} {SA_DIR} && "
        'exec "$@"'
    )
    daemon = start_daemon(
        kube, tmp_path / "d", {"url": "", "kubeconfig": ""}, daemons,
        wrap=["unshare", "--mount", "sh", "-c", script, "sh"],
        env={"KUBERNETES_SERVICE_HOST": kube.host, "KUBERNETES_SERVICE_PORT": str(kube.port)},
    )  # fmt: skip
    daemon.wait_readyz("the daemon ready in-cluster", lambda code, _: code == 200)
    stale_placement(api, namespace, "r1", daemon.node_ip)
    wait_for("the stale placement cleared", lambda: cleared(api, namespace, "r1"))

    # Rotation: the ServiceAccount made again (its old tokens are invalid then) and the
    # file replaced as kubelet does, atomically.
    core = client.CoreV1Api(api)
    core.delete_namespaced_service_account("meshwire", "meshwire")
    wait_for("the old token refused", lambda: daemon.readyz() is not None
             and "401" in (daemon.readyz() or (0, ""))[1])  # fmt: skip
    fresh = account / "token.new"
    fresh.write_text(service_account_token(api, "meshwire", "meshwire"))
    fresh.rename(account / "token")
    daemon.wait_readyz("the daemon ready on the rotated token", lambda code, _: code == 200)
    stale_placement(api, namespace, "r2", daemon.node_ip)
    wait_for("a write on the rotated token", lambda: cleared(api, namespace, "r2"))
