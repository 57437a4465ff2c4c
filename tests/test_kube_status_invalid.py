"""A Topology CRD stricter than meshnet's, on a real kube-apiserver: a status write it
rejects (422) is dropped with one warning carrying the server's message, never
retried, and the writes it accepts still land."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from meshwire.control.informer.client import make_api_client
from meshwire.control.model.topology import GROUP, PLURAL, VERSION
from meshwire.control.reconcile.status_writer import KubeStatusApi, StatusWriter
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
from tests.paths import CRDS

pytestmark = pytest.mark.root

WAIT = 60.0
MAX_ERROR = 16


@pytest.fixture(scope="module")
def namespace(kube: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """KNE's CRD with `status.plumbing_error` limited to MAX_ERROR characters."""
    crd = yaml.safe_load((CRDS / "kne-meshnet.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["status"]["properties"]["plumbing_error"]["maxLength"] = MAX_ERROR
    path: Path = tmp_path_factory.mktemp("crd") / "strict.yaml"
    path.write_text(yaml.safe_dump(crd))
    api = admin(kube)
    install_crd(api, path)
    name = create_namespace(api, unique("mw-strict"))
    try:
        yield name
    finally:
        delete_namespace(api, name)
        uninstall_crd(api)
        api.close()


async def test_a_rejected_status_write_is_dropped_once_with_the_servers_reason(
    kube: ControlPlane, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    objects = admin(kube)
    client.CustomObjectsApi(objects).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL,
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Topology", "metadata": {"name": "r1"},
         "spec": {"links": []}},
    )  # fmt: skip
    caplog.set_level(logging.INFO, logger="meshwire")
    api = await make_api_client("", str(kube.admin_kubeconfig))
    writer = StatusWriter(KubeStatusApi(api))
    writer.start()
    try:
        writer.set(f"{namespace}/r1", plumbing_error="eth1: " + "x" * 100)
        # Returns only once nothing is pending: a write retried forever never would.
        await asyncio.wait_for(writer.flush(), WAIT)
        writer.set(f"{namespace}/r1", src_ip="169.254.0.11")
        await asyncio.wait_for(writer.flush(), WAIT)
    finally:
        await writer.close()
        await api.close()

    warnings = [r.getMessage() for r in caplog.records if "status of topology" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "rejects ['plumbing_error'] as invalid, dropped and not retried" in warnings[0]
    assert "422" in warnings[0]
    assert f"{MAX_ERROR}" in warnings[0]
    assert topologies(objects, namespace)["r1"]["status"] == {"src_ip": "169.254.0.11"}
    objects.close()
