"""Pods go to nodes round robin in file order, or where a placement file says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab_helpers import StubRuntime, unique_lab

from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.placement import load_placement, place, round_robin

PODS = ["default/r1", "default/r2", "default/r3", "default/r4", "default/r5"]
NODES = ["node1", "node2"]


def test_round_robin_follows_file_order() -> None:
    assert round_robin(PODS, NODES) == {
        "default/r1": "node1",
        "default/r2": "node2",
        "default/r3": "node1",
        "default/r4": "node2",
        "default/r5": "node1",
    }


def test_placement_file_pins_pods_and_the_rest_go_round_robin(tmp_path: Path) -> None:
    path = tmp_path / "placement.yaml"
    path.write_text("r2: node1\ndefault/r5: node2\n")

    placed = place(PODS, NODES, load_placement(path))

    assert placed["default/r2"] == "node1"
    assert placed["default/r5"] == "node2"
    assert [placed[p] for p in ("default/r1", "default/r3", "default/r4")] == [*NODES, "node1"]


def test_placement_file_in_json_is_read_too(tmp_path: Path) -> None:
    path = tmp_path / "placement.json"
    path.write_text(json.dumps({"r1": "node2"}))

    assert load_placement(path) == {"r1": "node2"}


@pytest.mark.parametrize(
    ("wanted", "message"),
    [
        ({"r9": "node1"}, "pod 'r9' is not in the lab file"),
        ({"r1": "node7"}, "pod r1: node 'node7' is not one of node1, node2"),
    ],
)
def test_placement_naming_an_unknown_pod_or_node_is_an_error(
    wanted: dict[str, str], message: str
) -> None:
    with pytest.raises(LabError, match=message):
        place(PODS, NODES, wanted)


def test_placement_file_that_is_not_a_mapping_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "placement.yaml"
    path.write_text("- r1\n- node1\n")

    with pytest.raises(LabError, match=f"placement file {path}: expected a mapping"):
        load_placement(path)


@pytest.mark.root
def test_lab_up_places_pods_round_robin_or_from_the_placement_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    placement = tmp_path / "placement.yaml"
    placement.write_text("r3: node2\n")
    with unique_lab(tmp_path) as lab:
        args = ("up", str(lab.file), "--nodes", "2", "--wait", "0", "--placement", str(placement))
        assert lab.run(*args, runtime=StubRuntime(tmp_path)) == 0
        capsys.readouterr()

        assert lab.run("status", "--json", runtime=StubRuntime(tmp_path)) == 0

        pods = {p["pod"]: p["node"] for p in json.loads(capsys.readouterr().out)["pods"]}
        assert pods == {"default/r1": "node1", "default/r2": "node2", "default/r3": "node2"}
