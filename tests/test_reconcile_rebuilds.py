"""Which links a change of emulation rebuilt, as a pod's `status.link_rebuilds` says.

Driven through the desired links as the daemon drives them: Topology edits, then a
derivation step; the notes are what the daemon writes to each pod's status.
"""

from __future__ import annotations

import dataclasses

from derive_helpers import NODE_A, NODE_B, pair, pod
from slot_helpers import HashedSlots

from meshwire.control.model.emulation import Impairments
from meshwire.control.reconcile.derive import NodeView
from meshwire.control.reconcile.desired import DesiredLinks
from meshwire.control.reconcile.rebuilds import Rebuilds
from meshwire.control.tables.links import new_links_table
from meshwire.control.tables.topologies import TopologyTable

# 1,000 s after the epoch: the notes' time.
AT = "1970-01-01T00:16:40Z"
ONTO = f"link 1 (eth1): rebuilt onto the workers as its emulation began at {AT}, one carrier flap"


class Lab:
    """Pods r1 (eth1) and r2 (eth2) linked by uid 1, r1 on node A, r2 on `r2_node`."""

    def __init__(self, r2_node: str = NODE_A, **r1_end: object) -> None:
        self.topologies = TopologyTable()
        self.rebuilds = Rebuilds(clock=lambda: 1000.0)
        self.desired = DesiredLinks(
            self.topologies, new_links_table(), NodeView(node_ip=NODE_A), HashedSlots(),
            self.rebuilds,
        )  # fmt: skip
        self.r1, self.r2 = pair(1, "r1", "r2", "eth1", "eth2")
        self.r2_node = r2_node
        self.edit(**r1_end)
        self.topologies.upsert(pod("r2", self.r2, node=r2_node))
        self.desired.step()
        self.rebuilds.take_changed()

    def edit(self, **r1_end: object) -> None:
        """r1's Topology with its end of uid 1 changed as given."""
        end = dataclasses.replace(self.r1, **r1_end)  # type: ignore[arg-type]
        self.topologies.upsert(pod("r1", end, node=NODE_A))

    def step(self) -> dict[str, str]:
        """Derive; the notes of the pods whose note changed."""
        self.desired.step()
        return {p: self.rebuilds.note(p) for p in sorted(self.rebuilds.take_changed())}


def test_a_same_node_link_gaining_its_first_impairment_is_noted_on_both_pods() -> None:
    lab = Lab()
    lab.edit(impairments=Impairments(delay_ms=20))
    assert lab.step() == {
        "default/r1": ONTO,
        "default/r2": ONTO.replace("eth1", "eth2"),
    }


def test_a_cross_node_link_gaining_a_cable_state_is_noted_on_this_nodes_pod() -> None:
    lab = Lab(r2_node=NODE_B)
    lab.edit(state="down")
    assert lab.step() == {"default/r1": ONTO}


def test_later_changes_apply_in_place_and_note_nothing() -> None:
    lab = Lab()
    lab.edit(impairments=Impairments(delay_ms=20))
    lab.step()
    lab.edit(impairments=Impairments(delay_ms=30, loss_pct=5))
    assert lab.step() == {}
    lab.edit(impairments=Impairments(delay_ms=30), state="down")
    assert lab.step() == {}
    assert lab.rebuilds.note("default/r1") == ONTO


def test_clearing_the_last_impairment_notes_the_way_back() -> None:
    lab = Lab(r2_node=NODE_B)
    lab.edit(impairments=Impairments(delay_ms=20))
    lab.step()
    lab.edit()
    back = f"link 1 (eth1): rebuilt back onto the kernel's path as its emulation ended at {AT}"
    assert lab.step() == {"default/r1": f"{back}, one carrier flap"}


def test_a_link_emulated_from_its_creation_is_never_rebuilt() -> None:
    lab = Lab(impairments=Impairments(delay_ms=20))
    assert lab.rebuilds.note("default/r1") == lab.rebuilds.note("default/r2") == ""
    lab.edit(impairments=Impairments(delay_ms=5))
    assert lab.step() == {}


def test_a_link_removed_from_the_pod_drops_its_note() -> None:
    lab = Lab(r2_node=NODE_B)
    lab.edit(impairments=Impairments(delay_ms=20))
    lab.step()
    lab.topologies.upsert(pod("r1", node=NODE_A))
    assert lab.step() == {"default/r1": ""}
