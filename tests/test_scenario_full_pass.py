"""The periodic full pass repairs what no event reports (KNE #743's "safety net").

Nothing tells the daemon when someone deletes a link's interface or removes an
address in a pod by hand, or when a dataplane worker loses a TAP because the
TAP was deleted under it. Every `reconcile.full_interval` the daemon checks every
link against the kernel and repairs it. With the interval short, each of these
is put right by the first full pass after it, with no event to trigger it:
the daemon's pass counter (`meshwire_full_passes_total`) shows which pass did it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from outage_helpers import LINKS, addresses, ifindex, ip, lab_up, metric, pings, wait_until

pytestmark = pytest.mark.root

INTERVAL = 2
PASSES = "meshwire_full_passes_total"


def test_a_deleted_interface_a_removed_address_and_a_lost_tap_come_back_at_the_next_pass(
    tmp_path: Path,
) -> None:
    config = f"inter_node_link_type: grpc\nreconcile: {{full_interval: {INTERVAL}}}\n"
    with lab_up(tmp_path, config) as lab:
        wire, veth, wire3 = LINKS  # r1-r2 and r2-r3 over the gRPC wire, r1-r3 a veth
        for link in LINKS:
            wait_until(lambda link=link: pings(lab, link), f"link {link.uid} carrying a ping")
        tap_before = ifindex(lab, "r1", "eth1")
        before = metric(lab, 1, PASSES)

        ip(lab, "r3", "link", "del", veth.b.intf)  # both ends of the veth go
        ip(lab, "r3", "addr", "del", f"{wire3.b.address}/24", "dev", wire3.b.intf)
        ip(lab, "r1", "link", "del", wire.a.intf)  # node1's worker loses this TAP

        def repaired() -> bool:
            return (
                ifindex(lab, "r1", wire.a.intf) is not None
                and addresses(lab, "r3", wire3.b.intf) == [f"{wire3.b.address}/24"]
                and all(pings(lab, link) for link in LINKS)
            )

        # The first pass that began after the changes repairs them; by the start of
        # the one after it, its checks had a whole interval to run.
        wait_until(
            lambda: repaired() or metric(lab, 1, PASSES) >= before + 3,
            "every link repaired, or three more full passes",
        )
        assert repaired(), (
            f"not repaired by the next full pass (passes {before} -> {metric(lab, 1, PASSES)})"
        )
        assert metric(lab, 1, PASSES) > before
        # The TAP is a new one: the worker was handed it, and the wire carries again.
        assert ifindex(lab, "r1", wire.a.intf) != tap_before
