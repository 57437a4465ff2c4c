"""Which nodes are gone: the Node objects' addresses, as the node watch reads them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

from kubernetes.aio.client.exceptions import ApiException

from meshwire.control.daemon import node_watch
from meshwire.control.daemon.node_watch import LINK_TYPE, NodeWatch
from tests.informer_helpers import wait_until


def node(name: str, *addresses: tuple[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {"addresses": [{"type": t, "address": a} for t, a in addresses]},
    }


A = node("a", ("InternalIP", "10.0.0.1"), ("Hostname", "a"))
B = node("b", ("InternalIP", "10.0.0.2"))
C6 = node("c", ("InternalIP", "2001:db8::0:3"))


@contextlib.contextmanager
def patch_annotate(annotate: Callable[..., Any]) -> Iterator[None]:
    """The write to the API, replaced: these tests follow the logic; the real API's
    answer is tests/test_kube_node_watch.py's."""
    with mock.patch.object(node_watch, "annotate_node", annotate):
        yield


class Changes:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def test_no_node_is_gone_before_the_first_list() -> None:
    watch = NodeWatch("10.0.0.1", Changes())
    assert not watch.gone("10.0.0.9")


def test_an_address_no_node_has_is_gone_and_a_deleted_node_goes_with_its_addresses() -> None:
    changes = Changes()
    watch = NodeWatch("10.0.0.1", changes)
    watch.listed([A, B, C6])
    assert changes.count == 1
    assert not watch.gone("10.0.0.2")
    assert not watch.gone("2001:db8::3")  # compared in one spelling
    assert watch.gone("10.0.0.9")
    watch.changed("DELETED", B)
    assert watch.gone("10.0.0.2")
    assert changes.count == 2
    watch.changed("ADDED", B)  # the node registered again
    assert not watch.gone("10.0.0.2")
    assert changes.count == 3


def test_a_change_that_moves_no_address_calls_nobody() -> None:
    changes = Changes()
    watch = NodeWatch("10.0.0.1", changes)
    watch.listed([A, B])
    watch.changed("MODIFIED", B)  # a heartbeat: the same addresses
    assert changes.count == 1


def test_when_this_nodes_address_is_no_nodes_nothing_is_gone() -> None:
    """The daemon's node_ip is then not how the cluster names its nodes: following
    them would detach every link."""
    watch = NodeWatch("192.0.2.7", Changes())
    watch.listed([A, B])
    assert not watch.gone("10.0.0.9")
    assert not watch.gone("10.0.0.2")


def test_objects_without_a_name_or_addresses_are_read_as_nothing() -> None:
    watch = NodeWatch("10.0.0.1", Changes())
    watch.listed([A, {"metadata": {}}, "not an object", node("d")])
    assert watch.gone("10.0.0.2")
    assert not watch.gone("10.0.0.1")


def annotated(obj: dict[str, Any], link_type: str) -> dict[str, Any]:
    out = {**obj, "metadata": {**obj["metadata"], "annotations": {LINK_TYPE: link_type}}}
    return out


def test_each_nodes_link_type_is_its_annotation_by_every_address_of_the_node() -> None:
    changes = Changes()
    watch = NodeWatch("10.0.0.1", changes)
    assert watch.link_type("10.0.0.2") is None  # nothing listed yet
    e = node("e", ("InternalIP", "10.0.0.5"), ("ExternalIP", "192.0.2.5"))
    watch.listed([annotated(A, "grpc"), B, annotated(e, "vxlan"), annotated(C6, "tcp")])
    assert watch.link_type("10.0.0.1") == "grpc"
    assert watch.link_type("10.0.0.2") is None  # says nothing
    assert watch.link_type("192.0.2.5") == "vxlan"
    assert watch.link_type("2001:db8::3") is None  # not a link type
    assert changes.count == 1
    watch.changed("MODIFIED", annotated(B, "grpc"))
    assert watch.link_type("10.0.0.2") == "grpc"
    assert changes.count == 2  # a new link type: derived again
    watch.changed("MODIFIED", annotated(B, "grpc"))
    assert changes.count == 2
    watch.changed("DELETED", annotated(B, "grpc"))
    assert watch.link_type("10.0.0.2") is None


def test_the_annotation_is_written_when_ready_and_whenever_the_node_says_otherwise() -> None:
    async def scenario() -> list[dict[str, str]]:
        writes: list[dict[str, str]] = []
        watch = NodeWatch("10.0.0.1", Changes(), node_name="a", link_type="grpc")

        async def annotate(
            api: Any, name: str, annotations: dict[str, str], client_timeout: float
        ) -> None:
            assert name == "a"
            writes.append(annotations)

        ready = asyncio.Event()
        with patch_annotate(annotate):
            writer = asyncio.create_task(watch._keep_annotation(None, ready))  # type: ignore[arg-type]
            watch.listed([annotated(A, "vxlan"), B])
            await asyncio.sleep(0.05)
            assert writes == []  # not before the first reconcile is done
            ready.set()
            await wait_until(lambda: len(writes) == 1, "the first write", 5.0)
            watch.changed("MODIFIED", annotated(A, "grpc"))  # the write, seen
            await asyncio.sleep(0.05)
            assert len(writes) == 1
            watch.changed("DELETED", A)
            watch.changed("ADDED", A)  # registered anew, without it
            await wait_until(lambda: len(writes) == 2, "the write on the new Node", 5.0)
            writer.cancel()
        return writes

    assert asyncio.run(scenario()) == [{LINK_TYPE: "grpc"}] * 2


def test_a_refused_write_hands_this_node_back_to_its_config_until_the_node_says_it() -> None:
    async def scenario() -> None:
        changes = Changes()
        watch = NodeWatch("10.0.0.1", changes, node_name="a", link_type="grpc")

        async def refuse(
            api: Any, name: str, annotations: dict[str, str], client_timeout: float
        ) -> None:
            raise ApiException(status=403, reason="Forbidden")

        ready = asyncio.Event()
        ready.set()
        with patch_annotate(refuse):
            writer = asyncio.create_task(watch._keep_annotation(None, ready))  # type: ignore[arg-type]
            watch.listed([annotated(A, "vxlan")])
            assert watch.link_type("10.0.0.1") == "vxlan"
            await wait_until(lambda: watch.link_type("10.0.0.1") is None, "the refusal", 5.0)
            assert changes.count == 2  # derived again, with this daemon's config
            watch.changed("MODIFIED", annotated(A, "grpc"))  # somebody wrote it
            assert watch.link_type("10.0.0.1") == "grpc"
            writer.cancel()

    asyncio.run(scenario())
