"""The lab state round-trips through its directory; its topologies are written once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from meshwire.control.model.load import load_file
from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.state import LabDir, LabState, NodeRecord, PodRecord, ProcessRecord

TOPOLOGY = {
    "apiVersion": "networkop.co.uk/v1beta1",
    "kind": "Topology",
    "metadata": {"name": "r1", "namespace": "default"},
    "spec": {"links": [{"uid": 1, "peer_pod": "r2", "local_intf": "eth1", "peer_intf": "eth1"}]},
}


def a_state(directory: Path) -> LabState:
    state = LabState(name="t", directory=str(directory), topologies=[TOPOLOGY])
    state.netns.append("mwlt-hub")
    state.processes.append(ProcessRecord("api", 42, 7, ["meshwire", "api"], "/x/api.log"))
    state.nodes["node1"] = NodeRecord("node1", "mwlt-node1", "169.254.1.1", "c", "s", "m")
    state.pods["default/r1"] = PodRecord("default", "r1", "mwlt-default.r1", "node1", "c1")
    return state


def test_a_saved_state_loads_back_equal(tmp_path: Path) -> None:
    lab = LabDir(tmp_path)
    state = a_state(tmp_path)
    lab.save(state)
    assert lab.load() == state
    assert lab.load().pods["default/r1"].key == "default/r1"


def test_the_topologies_are_written_once_and_the_state_file_holds_the_rest(
    tmp_path: Path,
) -> None:
    lab = LabDir(tmp_path)
    state = a_state(tmp_path)
    lab.save(state)
    assert "topologies" not in json.loads(lab.state_file.read_text())
    assert json.loads(lab.topologies_file.read_text()) == {
        "apiVersion": "v1",
        "kind": "List",
        "items": [TOPOLOGY],
    }
    written = lab.topologies_file.stat().st_mtime_ns, lab.topologies_file.stat().st_ino
    state.pods["default/r1"].container_id = "c2"
    lab.save(state)
    assert (lab.topologies_file.stat().st_mtime_ns, lab.topologies_file.stat().st_ino) == written
    assert lab.load() == state


def test_the_topologies_file_is_what_apply_reads(tmp_path: Path) -> None:
    # `up` applies it: `meshwire apply -f` reads the same objects the state holds.
    lab = LabDir(tmp_path)
    lab.save(a_state(tmp_path))
    assert [t.to_dict() for t in load_file(lab.topologies_file)] == [{**TOPOLOGY, "status": {}}]


def test_topologies_written_as_a_plain_list_still_load(tmp_path: Path) -> None:
    lab = LabDir(tmp_path)
    state = a_state(tmp_path)
    lab.save(state)
    lab.topologies_file.write_text(json.dumps([TOPOLOGY]))
    assert lab.load() == state


def test_a_state_file_holding_its_topologies_still_loads(tmp_path: Path) -> None:
    lab = LabDir(tmp_path)
    state = a_state(tmp_path)
    lab.state_file.write_text(json.dumps(state.to_dict(), indent=1))
    assert lab.load() == state


def test_a_state_whose_topologies_never_got_written_loads_without_them(tmp_path: Path) -> None:
    # A crash between the two files: `down` needs the state, not the topologies.
    lab = LabDir(tmp_path)
    lab.save(a_state(tmp_path))
    lab.topologies_file.unlink()
    assert lab.load().topologies == []
    assert lab.load().processes[0].pid == 42


def test_unreadable_topologies_are_named(tmp_path: Path) -> None:
    lab = LabDir(tmp_path)
    lab.save(a_state(tmp_path))
    lab.topologies_file.write_text("{not json")
    with pytest.raises(LabError, match=r"topologies\.json"):
        lab.load()
