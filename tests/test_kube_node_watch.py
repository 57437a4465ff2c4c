"""The node watch on the real kube-apiserver: the daemon's link type written on its own
Node through the status subresource, kept there, and read back from every Node."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from meshwire.control.daemon.node_watch import LINK_TYPE, NodeWatch
from meshwire.control.informer.client import make_api_client
from tests.informer_helpers import wait_until
from tests.kube_cluster import ControlPlane
from tests.kube_helpers import admin, unique

WAIT = 30.0


class Nodes:
    """Node objects of the test's own (no kubelet behind them), deleted at the end."""

    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.made: list[str] = []

    def create(self, name: str, ip: str, link_type: str | None = None) -> None:
        metadata: dict[str, Any] = {"name": name}
        if link_type is not None:
            metadata["annotations"] = {LINK_TYPE: link_type}
        self.core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": metadata})
        self.made.append(name)
        # A Node's addresses are its status: the kubelet writes them there.
        self.core.patch_node_status(
            name, {"status": {"addresses": [{"type": "InternalIP", "address": ip}]}}
        )

    def annotation(self, name: str) -> str | None:
        annotations = self.core.read_node(name).metadata.annotations or {}
        return annotations.get(LINK_TYPE)

    def annotate(self, name: str, link_type: str) -> None:
        self.core.patch_node(name, {"metadata": {"annotations": {LINK_TYPE: link_type}}})

    def delete(self, name: str) -> None:
        try:
            self.core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture
def nodes(kube: ControlPlane) -> Iterator[Nodes]:
    api = admin(kube)
    made = Nodes(api)
    try:
        yield made
    finally:
        for name in made.made:
            made.delete(name)
        api.close()


async def in_thread(call: Callable[[], Any]) -> Any:
    return await asyncio.to_thread(call)


async def test_the_link_type_is_written_on_its_own_node_kept_and_read_from_every_node(
    kube: ControlPlane, nodes: Nodes
) -> None:
    own, other = unique("mw-nw-own"), unique("mw-nw-other")
    nodes.create(own, "198.51.100.1", link_type="vxlan")  # what the last daemon wrote
    nodes.create(other, "198.51.100.2", link_type="grpc")
    changes: list[None] = []
    watch = NodeWatch("198.51.100.1", lambda: changes.append(None), node_name=own, link_type="grpc")
    ready = asyncio.Event()
    api = await make_api_client("", str(kube.admin_kubeconfig))
    task = asyncio.create_task(watch.run(api, ready))
    try:
        await asyncio.wait_for(watch.synced.wait(), WAIT)
        assert watch.link_type("198.51.100.2") == "grpc"
        # Until this daemon's first reconcile is done, its Node says what it said.
        await asyncio.sleep(0.5)
        assert watch.link_type("198.51.100.1") == "vxlan"
        assert await in_thread(lambda: nodes.annotation(own)) == "vxlan"

        ready.set()
        await wait_until(
            lambda: watch.link_type("198.51.100.1") == "grpc", "the annotation written", WAIT
        )
        assert await in_thread(lambda: nodes.annotation(own)) == "grpc"
        seen = len(changes)

        # Somebody edits it: written back. Another node's change is only read.
        await in_thread(lambda: nodes.annotate(own, "vxlan"))
        await in_thread(lambda: nodes.annotate(other, "vxlan"))
        await wait_until(
            lambda: watch.link_type("198.51.100.2") == "vxlan", "the other's change read", WAIT
        )
        await wait_until(lambda: watch.link_type("198.51.100.1") == "grpc", "written back", WAIT)
        assert await in_thread(lambda: nodes.annotation(own)) == "grpc"
        assert len(changes) > seen

        # The Node deleted and registered anew, without it: written again.
        await in_thread(lambda: nodes.delete(own))
        await wait_until(lambda: watch.link_type("198.51.100.1") is None, "the node gone", WAIT)
        await in_thread(lambda: nodes.create(own, "198.51.100.1"))
        await wait_until(
            lambda: watch.link_type("198.51.100.1") == "grpc", "written on the new Node", WAIT
        )
        assert not task.done()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()


async def test_a_daemon_whose_node_does_not_exist_yet_writes_when_it_appears(
    kube: ControlPlane, nodes: Nodes
) -> None:
    own = unique("mw-nw-late")
    watch = NodeWatch("198.51.100.9", lambda: None, node_name=own, link_type="vxlan")
    ready = asyncio.Event()
    ready.set()
    api = await make_api_client("", str(kube.admin_kubeconfig))
    task = asyncio.create_task(watch.run(api, ready))
    try:
        await asyncio.wait_for(watch.synced.wait(), WAIT)
        assert watch.link_type("198.51.100.9") is None
        await in_thread(lambda: nodes.create(own, "198.51.100.9"))
        await wait_until(lambda: watch.link_type("198.51.100.9") == "vxlan", "written", WAIT)
        assert await in_thread(lambda: nodes.annotation(own)) == "vxlan"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()
