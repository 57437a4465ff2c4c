"""A peer node that accepts the connection and never answers costs its own wires, no more.

KNE #743 put a 5 s timeout on every handshake RPC so that a slow, booting or
stuck node fails its calls instead of blocking the others. Here one peer
node's kernel accepts TCP on the peer port and its daemon never says a word
(hang_helpers.py runs it for real, with gRPC, in the test's own netns): the
handshake with it fails on the per-RPC deadline (`peer.rpc_timeout`), the wire
towards it records why (what the pod's plumbing_error shows), and the wire
towards another node gets ready meanwhile and stays ready.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hang_helpers import GOOD_NODE, HUNG_NODE, PEER_PORT, run_child
from links_helpers import Namespaces, namespaces, needs_root, netns_name

from meshwire.control.common.config import load_config

__all__ = ["namespaces"]


def test_the_per_rpc_timeout_of_handshakes_is_five_seconds_by_default() -> None:
    assert load_config(None, env={}, overrides={"node_ip": "127.0.0.1"}).peer.rpc_timeout == 5.0


@needs_root
@pytest.mark.root
def test_a_peer_that_accepts_and_never_answers_fails_its_handshake_on_the_deadline_only(
    namespaces: Namespaces, tmp_path: Path
) -> None:
    netns = netns_name(namespaces.add("node"))

    seen = run_child(netns, tmp_path / "seen.json")

    assert seen.rpc_timeout == 5.0
    assert seen.accepted >= 1, "the hung node was never called"
    # The failure is the deadline's, not a refused or reset connection.
    assert seen.hung_problem.startswith(
        f"peer node {HUNG_NODE}: CreateWires to {HUNG_NODE}:{PEER_PORT}: DEADLINE_EXCEEDED"
    ), seen.hung_problem
    # The other node's wire did not wait for it, and is not disturbed by its failure.
    assert seen.good_ready_while_hung_call_out, f"the wire to {GOOD_NODE} waited for the hung call"
    assert seen.good_ready_at_end
