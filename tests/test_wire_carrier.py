"""A gRPC wire's TAP has carrier exactly while its far end is joined (meshnet #85).

A real TAP in a pod netns, handed to a real wire manager; the far node's side
is played by calling the manager as the Peer service and handshake loop do.
The pod sees the carrier as any program would: `ip link` says NO-CARRIER.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from dataplane_helpers import make_pod, netns_prefix, sh
from wire_helpers import DATA_PORT, PerfectPool, grpc_row

from meshwire.control.common.queue import WorkQueue
from meshwire.control.tables.links import End, new_links_table
from meshwire.control.wire.manager import WireManager
from meshwire.control.wire.state import Wire, offer
from meshwire.control.wire.types import TapRef
from meshwire.proto import meshwire_pb2

pytestmark = pytest.mark.root

FAR = "169.254.0.12"


@pytest.fixture
def prefix() -> Iterator[str]:
    with netns_prefix() as value:
        yield value


def carrier(netns: str) -> bool:
    return "NO-CARRIER" not in sh("ip", "-n", netns, "link", "show", "eth1")


def test_carrier_follows_the_far_end(prefix: str) -> None:
    pod = make_pod(prefix, "a", "10.0.0.1/24")
    pool = PerfectPool()
    manager = WireManager("169.254.0.11", True, pool, WorkQueue(), new_links_table())
    pool.desired = manager.desired
    row = grpc_row(1, "r1", "r2", FAR, netns=pod.path)
    far = grpc_row(1, "r2", "r1", "169.254.0.11")
    try:
        assert carrier(pod.netns)  # a fresh TAP with an fd: the kernel's default
        manager.attach(row, TapRef((1, 1), 1), os.dup(pod.fd))
        assert not carrier(pod.netns)  # handed over, but nothing at the far end yet

        far_offer = offer(
            Wire(far, TapRef((9, 9), 9), -1, 1), DATA_PORT
        )  # as the far node makes it
        (answer,) = manager.offered(FAR, True, [far_offer])
        assert answer.error == ""
        assert carrier(pod.netns)

        manager.withdrawn(FAR, [meshwire_pb2.WireEnd(namespace="lab", uid=1, pod="r1")])
        assert not carrier(pod.netns)

        manager.answered(FAR, row.key, meshwire_pb2.WireAnswer(wire_id=far.wire_id, data_port=1))
        assert carrier(pod.netns)
        # The far end moved away (the row now names another node): no carrier until it rejoins.
        moved = grpc_row(1, "r1", "r2", "169.254.0.13", netns=pod.path)
        manager.attach(moved, TapRef((1, 1), 1), None)
        assert not carrier(pod.netns)
    finally:
        manager.close()
        os.close(pod.fd)


def test_a_tap_new_to_the_manager_is_announced_once_its_carrier_is_on(prefix: str) -> None:
    # Before the carrier nothing can leave the TAP; a carrier back on the same
    # TAP is no new interface, a new TAP (the pod restarted) is.
    pod = make_pod(prefix, "a", "10.0.0.1/24")
    pool = PerfectPool()
    announced: list[End] = []
    manager = WireManager(
        "169.254.0.11", True, pool, WorkQueue(), new_links_table(), announced.append
    )
    pool.desired = manager.desired
    row = grpc_row(1, "r1", "r2", FAR, netns=pod.path)
    far = grpc_row(1, "r2", "r1", "169.254.0.11")
    far_offer = offer(Wire(far, TapRef((9, 9), 9), -1, 1), DATA_PORT)
    gone = [meshwire_pb2.WireEnd(namespace="lab", uid=1, pod="r1")]
    try:
        manager.attach(row, TapRef((1, 1), 1), os.dup(pod.fd))
        assert announced == []
        manager.offered(FAR, True, [far_offer])
        assert carrier(pod.netns) and announced == [row.local]

        manager.withdrawn(FAR, gone)
        manager.offered(FAR, True, [far_offer])
        assert carrier(pod.netns) and announced == [row.local]

        restarted = grpc_row(1, "r1", "r2", FAR, netns="/run/netns/r1-restarted")
        manager.attach(restarted, TapRef((1, 2), 2), os.dup(pod.fd))
        assert announced == [row.local, restarted.local]
    finally:
        manager.close()
        os.close(pod.fd)


def test_the_pod_end_is_told_the_wires_carrier_on_every_change_and_every_attach(
    prefix: str,
) -> None:
    # The pod sees its pod end, not the TAP: the manager gives it the same carrier.
    pod = make_pod(prefix, "a", "10.0.0.1/24")
    pool = PerfectPool()
    told: list[tuple[str, bool]] = []
    manager = WireManager(
        "169.254.0.11",
        True,
        pool,
        WorkQueue(),
        new_links_table(),
        pod_carrier=lambda row, on: told.append((row.key, on)),
    )
    pool.desired = manager.desired
    row = grpc_row(1, "r1", "r2", FAR, netns=pod.path)
    far = grpc_row(1, "r2", "r1", "169.254.0.11")
    try:
        manager.attach(row, TapRef((1, 1), 1), os.dup(pod.fd))
        assert told[-1] == (row.key, False)
        (answer,) = manager.offered(FAR, True, [offer(Wire(far, TapRef((9, 9), 9), -1, 1), 1)])
        assert answer.error == "" and told[-1] == (row.key, True)
        # A new pod end behind the same TAP (its pod restarted) is told again.
        count = len(told)
        manager.attach(row, TapRef((1, 1), 1), None)
        assert told[count:] == [(row.key, True)]
        manager.withdrawn(FAR, [meshwire_pb2.WireEnd(namespace="lab", uid=1, pod="r1")])
        assert told[-1] == (row.key, False)
    finally:
        manager.close()
        os.close(pod.fd)
