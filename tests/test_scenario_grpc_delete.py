"""Deleting a lab's Topology objects takes its gRPC wires down on both nodes, end to end.

KNE #743: a Topology deleted while its pods run must take its wires with it
(TAPs, worker entries, streams), not leave them to the next restart. Here the
lab runs its cross-node links over the gRPC wire; `meshwire delete -f` of the
lab file removes every link end in every pod, and on each node the daemon
ends with no wire, its workers with none, and no stream to the other node.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from outage_helpers import (
    LINKS,
    delete_topologies,
    ifindexes,
    lab_up,
    metric,
    pings,
    samples,
    wait_until,
)

pytestmark = pytest.mark.root


def test_deleting_the_topologies_removes_every_wire_on_both_nodes(tmp_path: Path) -> None:
    with lab_up(tmp_path, "inter_node_link_type: grpc\n") as lab:
        for link in LINKS:
            wait_until(lambda link=link: pings(lab, link), f"link {link.uid} carrying a ping")
        assert metric(lab, 1, 'meshwire_wires{state="ready"}') == 2
        wait_until(
            lambda: any(samples(lab, 1, "meshwire_wire_stream_refs{").values()),
            "node1's workers reporting their stream to node2",
        )

        delete_topologies(lab)

        wait_until(
            lambda: set(ifindexes(lab).values()) == {None}, "every link end gone from every pod"
        )
        series = (
            'meshwire_wires{state="ready"}',
            'meshwire_wires{state="waiting"}',
            "meshwire_wires_in_workers",
        )

        def nothing_left() -> bool:
            return all(
                all(metric(lab, node, name) == 0 for name in series)
                and not any(samples(lab, node, "meshwire_wire_stream_refs{").values())
                for node in (1, 2)
            )

        wait_until(nothing_left, "no wire left in either daemon or its workers")
