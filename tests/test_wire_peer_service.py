"""The Peer service and client over real gRPC: another node's handshakes and goodbyes.

Each test's node serves in a netns of its own (peer_helpers.py): this node runs
pod r2, whose end of link lab/3 is a wire towards pod r1 on node PEER_NODE; the
requests are what PEER_NODE (or some other caller) sends.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from links_helpers import Namespaces, namespaces, needs_root, netns_name
from peer_helpers import (
    ANY_PORT,
    CLOSED_PORT,
    DATA_PORT,
    PEER6_PORT,
    PEER_NODE,
    SLOW_PORT,
    WIRE,
    Call,
    Run,
    run_node,
)
from slot_helpers import slot

from meshwire.control.common.ids import UID_LIMIT, wire_id
from meshwire.control.wire.state import note
from meshwire.control.wire.types import TapRef
from meshwire.proto import meshwire_pb2

pytestmark = [needs_root, pytest.mark.root]
__all__ = ["namespaces"]

# The port of PEER_NODE's worker that owns r1's end.
PEER_DATA_PORT = 7100
# r1's wire id, which frames this node sends for the wire carry.
FAR_WIRE_ID = wire_id(slot("lab"), 3, "r1", "r2")
OUR_END = {"namespace": "lab", "uid": 3, "pod": "r2"}

Node = Callable[..., Run]


@pytest.fixture
def node(namespaces: Namespaces, tmp_path: Path) -> Node:
    """`node(*calls)`: this node, serving in a netns of the test's own, answers `calls`."""
    netns = netns_name(namespaces.add("node"))

    def run(*calls: Call) -> Run:
        return run_node(netns, tmp_path, *calls)

    return run


def offer(
    uid: int = 3, pod: str = "r1", peer_pod: str = "r2", namespace: str = "lab"
) -> meshwire_pb2.WireOffer:
    """Pod `pod`'s offer (on the calling node) for its end of link `uid` to `peer_pod` here."""
    return meshwire_pb2.WireOffer(
        local=meshwire_pb2.WireEnd(namespace=namespace, uid=uid, pod=pod),
        peer_pod=peer_pod,
        wire_id=wire_id(slot(namespace), uid, pod, peer_pod) if 0 < uid < UID_LIMIT else 0,
        data_port=PEER_DATA_PORT,
    )


def create(
    *offers: meshwire_pb2.WireOffer, node_ip: str = PEER_NODE, offloads: bool = True
) -> Call:
    request = meshwire_pb2.CreateWiresRequest(
        node="node-a", node_ip=node_ip, wires=offers or [offer()], offloads=offloads
    )
    return Call(request)


def end(namespace: str = "lab", uid: int = 3, pod: str = "r2") -> meshwire_pb2.WireEnd:
    """This node's end of a wire, as DeleteWires names it."""
    return meshwire_pb2.WireEnd(namespace=namespace, uid=uid, pod=pod)


def delete(*ends: meshwire_pb2.WireEnd, node_ip: str = PEER_NODE) -> Call:
    request = meshwire_pb2.DeleteWiresRequest(node="node-a", node_ip=node_ip, wires=ends or [end()])
    return Call(request)


def test_an_offer_for_a_wire_this_node_has_is_answered_and_makes_it_ready(node: Node) -> None:
    run = node(create(), create())

    assert not run.before.ready
    first, again = run.calls
    assert first.error is None
    assert first.reply == {
        "wires": [{"end": OUR_END, "wire_id": WIRE.wire_id, "data_port": DATA_PORT}]
    }
    assert first.after.ready
    # The worker sends r2's frames to r1's worker, tagged with r1's wire id.
    assert first.after.worker == {
        "wire_id": WIRE.wire_id,
        "namespace": "lab",
        "peer_node": PEER_NODE,
        "peer_port": PEER_DATA_PORT,
        "peer_wire_id": FAR_WIRE_ID,
        "impairments": [],
        "local": False,
        # What a restarted daemon reads back from the worker: the row and its TAP.
        "note": note(WIRE.key, TapRef((1, 2), 7)),
    }
    assert again.reply == first.reply and again.after == first.after  # idempotent


@pytest.mark.parametrize(
    ("unknown", "names"),
    [
        (offer(uid=4), ["lab/4", "pod r2"]),
        (offer(peer_pod="r7"), ["lab/3", "pod r7"]),
        (offer(pod="r9"), ["lab/3", "pod r2", "r9"]),
    ],
    ids=["other-link", "pod-not-here", "link-to-another-pod"],
)
def test_an_offer_for_a_wire_this_node_does_not_have_is_pending(
    node: Node, unknown: meshwire_pb2.WireOffer, names: list[str]
) -> None:
    (outcome,) = node(create(unknown)).calls

    assert outcome.reply is not None
    (answer,) = outcome.reply["wires"]
    assert answer["pending"] is True
    assert all(name in answer["error"] for name in names), answer["error"]
    assert "wire_id" not in answer and "data_port" not in answer
    assert not outcome.after.ready


def test_an_offer_from_another_node_than_the_peers_is_pending(node: Node) -> None:
    (outcome,) = node(create(node_ip="192.0.2.77")).calls

    assert outcome.reply is not None
    (answer,) = outcome.reply["wires"]
    assert answer["pending"] is True
    assert "lab/3" in answer["error"] and "192.0.2.77" in answer["error"]
    assert PEER_NODE in answer["error"]
    assert not outcome.after.ready and outcome.after.worker is None


def test_offloads_that_differ_between_the_nodes_are_an_error_not_pending(node: Node) -> None:
    (outcome,) = node(create(offloads=False)).calls

    assert outcome.reply is not None
    (answer,) = outcome.reply["wires"]
    assert "pending" not in answer
    assert "lab/3" in answer["error"] and "dataplane.offloads" in answer["error"]
    assert not outcome.after.ready


def test_one_answer_per_offer_in_request_order(node: Node) -> None:
    (outcome,) = node(create(offer(uid=4), offer(), offer(uid=5))).calls

    assert outcome.reply is not None
    answers = outcome.reply["wires"]
    assert [a["end"]["uid"] for a in answers] == [4, 3, 5]
    assert [a.get("pending", False) for a in answers] == [True, False, True]
    assert answers[1]["wire_id"] == WIRE.wire_id
    assert outcome.after.ready


def with_offer(**fields: object) -> Call:
    """A CreateWires whose one offer has `fields` changed ("local_<x>" for its WireEnd)."""
    one = offer()
    for name, value in fields.items():
        if name.startswith("local_"):
            setattr(one.local, name.removeprefix("local_"), value)
        else:
            setattr(one, name, value)
    return create(one)


TOO_LONG = "a" * 254
# 127 characters, 254 bytes: names are limited in bytes.
TOO_LONG_IN_BYTES = "é" * 127


@pytest.mark.parametrize(
    ("call", "field"),
    [
        pytest.param(create(node_ip="node-a"), "node_ip", id="node_ip-a-name"),
        pytest.param(create(node_ip=""), "node_ip", id="node_ip-empty"),
        pytest.param(with_offer(local_namespace=""), "wires[0].local.namespace", id="ns-empty"),
        pytest.param(
            with_offer(local_namespace=TOO_LONG), "wires[0].local.namespace", id="ns-too-long"
        ),
        pytest.param(with_offer(local_pod=""), "wires[0].local.pod", id="pod-empty"),
        pytest.param(
            with_offer(local_pod=TOO_LONG_IN_BYTES), "wires[0].local.pod", id="pod-too-many-bytes"
        ),
        pytest.param(with_offer(peer_pod=""), "wires[0].peer_pod", id="peer_pod-empty"),
        pytest.param(with_offer(peer_pod=TOO_LONG), "wires[0].peer_pod", id="peer_pod-too-long"),
        pytest.param(with_offer(local_uid=0), "wires[0].local.uid", id="uid-0"),
        pytest.param(with_offer(local_uid=UID_LIMIT), "wires[0].local.uid", id="uid-too-big"),
        pytest.param(with_offer(data_port=0), "wires[0].data_port", id="data_port-0"),
        pytest.param(with_offer(data_port=65536), "wires[0].data_port", id="data_port-too-big"),
        pytest.param(create(offer(), offer(uid=0)), "wires[1].local.uid", id="second-offer"),
        pytest.param(delete(node_ip="10.0.0.300"), "node_ip", id="goodbye-node_ip"),
        pytest.param(delete(end(namespace="")), "wires[0].namespace", id="goodbye-ns-empty"),
        pytest.param(delete(end(pod=TOO_LONG)), "wires[0].pod", id="goodbye-pod-too-long"),
        pytest.param(delete(end(uid=0)), "wires[0].uid", id="goodbye-uid-0"),
        pytest.param(delete(end(uid=UID_LIMIT)), "wires[0].uid", id="goodbye-uid-too-big"),
    ],
)
def test_an_unusable_request_fails_invalid_argument_naming_the_field(
    node: Node, call: Call, field: str
) -> None:
    joined, refused = node(create(), call).calls

    assert refused.reply is None
    assert refused.error is not None
    assert refused.error.startswith("PeerError: ")
    assert f"INVALID_ARGUMENT: {field}: " in refused.error
    assert refused.after == joined.after  # nothing in a refused request was acted on


@pytest.mark.parametrize(
    "call",
    [
        create(offer(namespace="n" * 253, pod="p" * 253, peer_pod="q" * 253)),
        create(offer(uid=UID_LIMIT - 1), offer(uid=1)),
    ],
    ids=["names-of-253-bytes", "uids-at-the-bounds"],
)
def test_a_request_at_the_limits_is_answered(node: Node, call: Call) -> None:
    (outcome,) = node(call).calls

    assert outcome.error is None
    assert outcome.reply is not None
    assert all(answer["pending"] for answer in outcome.reply["wires"])


def test_a_goodbye_from_the_joined_node_makes_the_wire_not_ready(node: Node) -> None:
    joined, goodbye = node(create(), delete()).calls

    assert joined.after.ready
    assert goodbye.error is None
    assert goodbye.reply == {"wires": [{"end": OUR_END}]}
    assert not goodbye.after.ready and goodbye.after.worker is None


def test_a_goodbye_from_another_node_changes_nothing(node: Node) -> None:
    joined, goodbye = node(create(), delete(node_ip="192.0.2.77")).calls

    assert goodbye.error is None
    assert goodbye.reply == {"wires": [{"end": OUR_END}]}
    assert goodbye.after == joined.after
    assert goodbye.after.ready


def test_a_goodbye_for_a_wire_this_node_does_not_have_is_success(node: Node) -> None:
    joined, goodbye = node(create(), delete(end(uid=4))).calls

    assert goodbye.error is None
    assert goodbye.reply == {"wires": [{"end": {"namespace": "lab", "uid": 4, "pod": "r2"}}]}
    assert goodbye.after == joined.after


@pytest.mark.parametrize(
    ("call", "method"),
    [(create(), "CreateWires"), (delete(), "DeleteWires")],
    ids=["CreateWires", "DeleteWires"],
)
def test_a_call_to_a_node_where_nothing_listens_raises_peer_error_naming_it(
    node: Node, call: Call, method: str
) -> None:
    (outcome,) = node(Call(call.request, port=CLOSED_PORT)).calls

    assert outcome.reply is None
    assert outcome.error is not None
    # A PeerError, not the child's own guard; failing fast (UNAVAILABLE) rather
    # than waiting out the RPC timeout (DEADLINE_EXCEEDED).
    assert outcome.error.startswith(f"PeerError: {method} to 127.0.0.1:{CLOSED_PORT}: ")
    assert "UNAVAILABLE" in outcome.error
    assert not outcome.after.ready


def test_a_peer_node_that_is_slow_to_answer_is_still_reached_within_the_timeout(
    node: Node,
) -> None:
    # Its connection takes half a second to come through, well within the RPC timeout.
    (outcome,) = node(Call(create().request, port=SLOW_PORT)).calls

    assert outcome.error is None
    assert outcome.reply is not None
    assert outcome.reply["wires"][0]["wire_id"] == WIRE.wire_id
    assert outcome.after.ready


def test_a_peer_node_on_ipv6_is_served_and_reached(node: Node) -> None:
    # `peer.listen: "[::1]:PORT"` binds, and a peer node whose address is IPv6 is dialled.
    (outcome,) = node(Call(create().request, port=PEER6_PORT, host="::1")).calls

    assert outcome.error is None
    assert outcome.reply is not None
    assert outcome.reply["wires"][0]["wire_id"] == WIRE.wire_id
    assert outcome.after.ready


def test_a_call_to_an_ipv6_node_where_nothing_listens_names_it_in_brackets(node: Node) -> None:
    (outcome,) = node(Call(create().request, port=CLOSED_PORT, host="::1")).calls

    assert outcome.error is not None
    assert outcome.error.startswith(f"PeerError: CreateWires to [::1]:{CLOSED_PORT}: ")


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_a_listen_address_without_host_serves_both_families(node: Node, host: str) -> None:
    (outcome,) = node(Call(create().request, port=ANY_PORT, host=host)).calls

    assert outcome.error is None
    assert outcome.reply is not None
    assert outcome.after.ready
