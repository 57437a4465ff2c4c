"""The uninstall watch on the real kube-apiserver: meshwire's namespace deleted takes the
shim out of the chain and holds the links; anything else leaves both alone."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from cni_helpers import temp_dir
from kubernetes.client import CoreV1Api

from meshwire.control.daemon.uninstall_watch import UninstallWatch
from meshwire.control.informer.client import make_api_client
from tests.kube_cluster import ControlPlane
from tests.kube_helpers import admin, create_namespace, finish_namespace_deletion, unique

CHAINED = {
    "cniVersion": "0.4.0",
    "name": "node",
    "plugins": [
        {"type": "bridge", "bridge": "cni0"},
        {"type": "meshnet", "name": "meshwire", "meshwire_socket": "/run/meshwire/cni.sock"},
    ],
}
WAIT = 60.0


@pytest.fixture
def conf_dir() -> Iterator[Path]:
    root = temp_dir()
    (root / "10-node.conflist").write_text(json.dumps(CHAINED))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def plugin_types(conf_dir: Path) -> list[str]:
    return [p["type"] for p in json.loads((conf_dir / "10-node.conflist").read_text())["plugins"]]


async def test_deleting_meshwires_namespace_unchains_the_shim_and_holds(
    kube: ControlPlane, conf_dir: Path
) -> None:
    api = admin(kube)
    namespace = create_namespace(api, unique("mw-uninstall"))
    held: list[bool] = []
    watch = UninstallWatch(namespace, str(conf_dir), lambda: held.append(True))
    client = await make_api_client("", str(kube.admin_kubeconfig))
    task = asyncio.create_task(watch.run(client))
    try:
        await asyncio.wait_for(watch.checked.wait(), WAIT)
        # Another namespace going, and time passing, change nothing.
        other = create_namespace(api, unique("mw-other"))
        finish_namespace_deletion(api, other)
        await asyncio.sleep(1)
        assert not watch.uninstalled.is_set() and held == []
        assert plugin_types(conf_dir) == ["bridge", "meshnet"]

        await asyncio.to_thread(CoreV1Api(api).delete_namespace, namespace)
        await asyncio.wait_for(watch.uninstalled.wait(), WAIT)
        assert held == [True]
        assert plugin_types(conf_dir) == ["bridge"]
        assert not task.done(), "the watch idles after the uninstall, it does not end"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
        finish_namespace_deletion(api, namespace)


async def test_a_namespace_already_going_at_start_is_uninstalled_before_any_reconcile(
    kube: ControlPlane, conf_dir: Path
) -> None:
    api = admin(kube)
    namespace = create_namespace(api, unique("mw-going"))
    # A finalizer of the test's keeps the namespace Terminating.
    core = CoreV1Api(api)
    core.patch_namespace(namespace, {"metadata": {"finalizers": ["meshwire.dev/test"]}})
    core.delete_namespace(namespace)
    held: list[bool] = []
    watch = UninstallWatch(namespace, str(conf_dir), lambda: held.append(True))
    aio = await make_api_client("", str(kube.admin_kubeconfig))
    task = asyncio.create_task(watch.run(aio))
    try:
        await asyncio.wait_for(watch.checked.wait(), WAIT)
        assert watch.uninstalled.is_set() and held == [True]
        assert plugin_types(conf_dir) == ["bridge"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await aio.close()
        core.patch_namespace(namespace, {"metadata": {"finalizers": []}})
        finish_namespace_deletion(api, namespace)
