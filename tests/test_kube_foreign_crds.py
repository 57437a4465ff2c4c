"""The Topology CRDs clusters already have (tests/data/crds), on a real kube-apiserver.

KNE's (`kne-meshnet.yaml`: apiextensions v1, a structural schema, so the
server prunes every field it does not list, per-link `mtu` among them) and
upstream meshnet's (`meshnet-upstream.yaml`: apiextensions v1beta1, which
keeps unknown fields). Under each, every status write of the daemon's status
writer validates and lands as written, and `meshwire apply` of a file using a
field the CRD prunes warns once, naming the field, and is `unchanged` when
applied again.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from meshwire.control.informer.client import make_api_client
from meshwire.control.informer.informer import InformerOptions
from meshwire.control.model.topology import GROUP, PLURAL, VERSION
from meshwire.control.reconcile.status_writer import KubeStatusApi, StatusWriter
from tests.informer_helpers import RecordingSink, running
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
from tests.paths import CRDS, MESHNET

pytestmark = pytest.mark.root

# CRD file -> whether it prunes fields its schema does not list.
CRD_FILES = {"kne-meshnet.yaml": True, "meshnet-upstream.yaml": False}
WAIT = 60.0


@pytest.fixture(scope="module", params=sorted(CRD_FILES))
def crd(request: pytest.FixtureRequest, kube: ControlPlane) -> Iterator[str]:
    api = admin(kube)
    install_crd(api, CRDS / request.param)
    try:
        yield str(request.param)
    finally:
        uninstall_crd(api)
        api.close()


@pytest.fixture
def namespace(kube: ControlPlane, crd: str) -> Iterator[str]:
    api = admin(kube)
    name = create_namespace(api, unique("mw-foreign"))
    try:
        yield name
    finally:
        delete_namespace(api, name)
        api.close()


def apply(kube: ControlPlane, path: Path, namespace: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "meshwire.tools.cli", "apply", "-f", str(path),
         "--kubeconfig", str(kube.admin_kubeconfig), "-n", namespace],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


async def test_every_status_write_validates_and_lands_as_written(
    kube: ControlPlane, crd: str, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    applied = apply(kube, MESHNET / "3node.yml", namespace)
    assert applied.returncode == 0, applied.stderr
    caplog.set_level(logging.INFO, logger="meshwire")
    api = await make_api_client("", str(kube.admin_kubeconfig))
    writer = StatusWriter(KubeStatusApi(api))
    writer.start()
    try:
        placed = {
            "src_ip": "169.254.0.11",
            "net_ns": "/run/netns/mw-r1",
            "container_id": "c-r1",
            "plumbing_error": "",
        }
        writer.set(f"{namespace}/r1", **placed)
        writer.set(f"{namespace}/r2", plumbing_error="eth1: no such peer")
        await asyncio.wait_for(writer.flush(), WAIT)
        # The CNI DEL's write: conditional on the container, through a read and a precondition.
        writer.set(f"{namespace}/r3", if_container="", **{**placed, "container_id": "c-r3"})
        writer.set(f"{namespace}/r1", if_container="c-r1", src_ip="", net_ns="", container_id="")
        await asyncio.wait_for(writer.flush(), WAIT)
    finally:
        await writer.close()
        await api.close()

    stored = topologies(admin(kube), namespace)
    assert stored["r1"]["status"] == {
        "src_ip": "",
        "net_ns": "",
        "container_id": "",
        "plumbing_error": "",
    }
    assert stored["r2"]["status"] == {"plumbing_error": "eth1: no such peer"}
    assert stored["r3"]["status"] == {**placed, "container_id": "c-r3"}
    # Nothing failed, nothing was retried, nothing dropped.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO and
            "status of topology" in r.getMessage()] == []  # fmt: skip


async def test_link_rebuilds_is_written_without_fault_and_kept_where_the_crd_keeps_it(
    kube: ControlPlane, crd: str, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """meshwire's own status field: KNE's CRD prunes it from the write, which still lands."""
    applied = apply(kube, MESHNET / "2node.yml", namespace)
    assert applied.returncode == 0, applied.stderr
    name = sorted(topologies(admin(kube), namespace))[0]
    caplog.set_level(logging.INFO, logger="meshwire")
    note = "link 1 (eth1): rebuilt onto the workers as its emulation began at X, one carrier flap"
    api = await make_api_client("", str(kube.admin_kubeconfig))
    writer = StatusWriter(KubeStatusApi(api))
    writer.start()
    try:
        writer.set(f"{namespace}/{name}", src_ip="169.254.0.11", link_rebuilds=note)
        await asyncio.wait_for(writer.flush(), WAIT)
    finally:
        await writer.close()
        await api.close()
    kept = {} if CRD_FILES[crd] else {"link_rebuilds": note}
    assert topologies(admin(kube), namespace)[name]["status"] == {"src_ip": "169.254.0.11", **kept}
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO and
            "status of topology" in r.getMessage()] == []  # fmt: skip


def test_a_field_the_crd_prunes_warns_once_and_reapplies_unchanged(
    kube: ControlPlane, crd: str, namespace: str, tmp_path: Path
) -> None:
    data = yaml.safe_load((MESHNET / "3node.yml").read_text())
    for item in data["items"]:
        for link in item["spec"].get("links") or []:
            link["mtu"] = 9000
    lab = tmp_path / "mtu.yml"
    lab.write_text(yaml.safe_dump(data))

    first = apply(kube, lab, namespace)
    assert first.returncode == 0, first.stderr
    assert first.stdout.count(" created") == 3
    stored = topologies(admin(kube), namespace)
    mtus = [link.get("mtu") for obj in stored.values() for link in obj["spec"]["links"]]
    if CRD_FILES[crd]:
        assert mtus == [None] * len(mtus)
        warnings = first.stderr.strip().splitlines()
        assert len(warnings) == 1, first.stderr
        assert "warning: the server dropped spec.links[].mtu" in warnings[0]
        assert "deploy/crd.yaml" in warnings[0]
    else:
        assert mtus == [9000] * len(mtus)
        assert first.stderr == ""

    versions = {name: obj["metadata"]["resourceVersion"] for name, obj in stored.items()}
    second = apply(kube, lab, namespace)
    assert second.returncode == 0, second.stderr
    assert second.stdout.count(" unchanged") == 3, second.stdout
    assert {n: o["metadata"]["resourceVersion"] for n, o in topologies(
        admin(kube), namespace).items()} == versions  # fmt: skip


def test_status_written_through_the_main_resource_is_ignored(
    kube: ControlPlane, crd: str, namespace: str
) -> None:
    applied = apply(kube, MESHNET / "2node.yml", namespace)
    assert applied.returncode == 0, applied.stderr
    objects = client.CustomObjectsApi(admin(kube))
    name = next(iter(topologies(admin(kube), namespace)))
    objects.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, {"status": {"src_ip": "10.1.1.1"}}
    )
    assert not objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name).get(
        "status"
    )


async def test_a_status_skipped_in_the_crds_own_shape_is_read(
    kube: ControlPlane, crd: str, namespace: str
) -> None:
    """Objects meshnet's own daemons wrote stay readable: `status.skipped` is a list of
    {pod_name, link_id} under KNE's CRD, of pod names under upstream meshnet's."""
    applied = apply(kube, MESHNET / "2node.yml", namespace)
    assert applied.returncode == 0, applied.stderr
    names = sorted(topologies(admin(kube), namespace))
    skipped: list[object] = (
        [{"pod_name": names[1], "link_id": 1}] if crd == "kne-meshnet.yaml" else [names[1]]
    )
    client.CustomObjectsApi(admin(kube)).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, names[0],
        {"status": {"src_ip": "169.254.0.11", "skipped": skipped}},
    )  # fmt: skip
    api = await make_api_client("", str(kube.admin_kubeconfig))
    sink = RecordingSink()
    try:
        async with running(api, sink, InformerOptions(namespace=namespace)) as informer:
            await asyncio.wait_for(informer.synced.wait(), WAIT)
            assert informer.stats.unreadable == 0
            row = sink.get(f"{namespace}/{names[0]}")
            assert row is not None
            assert [s.pod_name for s in row.status.skipped] == [names[1]]
            assert row.status.src_ip == "169.254.0.11"
    finally:
        await api.close()
