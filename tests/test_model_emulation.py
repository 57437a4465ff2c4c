"""A link end's impairments and cable state: how they are read, checked and set where
a CRD prunes them (the `meshwire.dev/emulation` annotation)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_helpers import schema_errors

from meshwire.control.model.emulation import ANNOTATION, Impairments
from meshwire.control.model.topology import ModelError, Topology
from meshwire.control.model.validate import validate_topology
from tests.paths import CRDS, files


def obj(link: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "r1", "namespace": "lab"}
    if annotations is not None:
        metadata["annotations"] = annotations
    base = {"uid": 4, "peer_pod": "r2", "local_intf": "eth1", "peer_intf": "eth1"}
    return {"metadata": metadata, "spec": {"links": [base | link]}}


def problems(link: dict[str, Any]) -> list[str]:
    return [str(p) for p in validate_topology(Topology.from_dict(obj(link))).problems]


def test_impairments_and_state_are_read_and_written_back_as_given() -> None:
    given = {"impairments": {"delay_ms": 20, "jitter_ms": 2.5, "rate_mbps": 100}, "state": "down"}
    topology = Topology.from_dict(obj(given))
    (link,) = topology.links
    assert link.impairments == Impairments(delay_ms=20, jitter_ms=2.5, rate_mbps=100)
    assert link.down
    assert {k: topology.to_dict()["spec"]["links"][0][k] for k in given} == given
    assert validate_topology(topology).ok


def test_a_link_without_them_is_unimpaired_and_up() -> None:
    (link,) = Topology.from_dict(obj({})).links
    assert not link.impairments and not link.down
    assert "impairments" not in link.to_dict() and "state" not in link.to_dict()


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"loss_pct": 101}, "impairments.loss_pct: 101 is out of range 0..100"),
        ({"corrupt_pct": -1}, "impairments.corrupt_pct: -1 is negative"),
        ({"duplicate_pct": 100.5}, "impairments.duplicate_pct: 100.5 is out of range 0..100"),
        ({"reorder_pct": 200}, "impairments.reorder_pct: 200 is out of range 0..100"),
        ({"delay_ms": 60001}, "impairments.delay_ms: 60001 is out of range 0..60000"),
        (
            {"delay_ms": 10, "jitter_ms": 11},
            "impairments.jitter_ms: 11 is larger than delay_ms 10 "
            "(a frame cannot leave before it was sent)",
        ),
        ({"rate_mbps": 2e6}, "impairments.rate_mbps: 2e+06 is out of range 0..1e+06"),
    ],
)
def test_a_value_out_of_range_names_object_link_and_field(
    given: dict[str, float], message: str
) -> None:
    assert problems({"impairments": given}) == [
        f"topology lab/r1: link uid 4 (spec.links[0]): {message}"
    ]


def test_a_state_other_than_up_or_down_is_a_problem() -> None:
    assert problems({"state": "unplugged"}) == [
        "topology lab/r1: link uid 4 (spec.links[0]): state: 'unplugged' is not one of up, down"
    ]


def test_a_link_to_the_host_cannot_be_emulated() -> None:
    found = problems({"peer_pod": "localhost", "state": "down"})
    assert found == [
        "topology lab/r1: link uid 4 (spec.links[0]): state: a link to the host (macvlan) "
        "cannot be emulated; only pod-to-pod links can"
    ]


@pytest.mark.parametrize(
    ("impairments", "message"),
    [
        ({"delay": 5}, "impairments.delay: unknown field"),
        ({"delay_ms": "20ms"}, "impairments.delay_ms: expected a number, got '20ms'"),
        ({"loss_pct": True}, "impairments.loss_pct: expected a number, got True"),
    ],
)
def test_an_unreadable_impairment_names_object_link_and_field(
    impairments: dict[str, Any], message: str
) -> None:
    with pytest.raises(ModelError, match=r"topology lab/r1: spec\.links\[0\]: ") as error:
        Topology.from_dict(obj({"impairments": impairments}))
    assert message in str(error.value)


def test_the_annotation_sets_impairments_and_state_of_the_interfaces_it_names() -> None:
    spec = {"impairments": {"loss_pct": 5}}
    annotation = {"eth1": {"state": "down", "impairments": {"delay_ms": 7}}}
    topology = Topology.from_dict(obj(spec, {ANNOTATION: json.dumps(annotation)}))
    (link,) = topology.links
    assert link.impairments == Impairments(delay_ms=7)
    assert link.down


def test_the_annotation_leaves_what_it_does_not_say_to_the_spec() -> None:
    spec = {"impairments": {"loss_pct": 5}}
    annotation = {"eth1": {"state": "down"}, "eth9": {"impairments": {"delay_ms": 1}}}
    (link,) = Topology.from_dict(obj(spec, {ANNOTATION: json.dumps(annotation)})).links
    assert link.impairments == Impairments(loss_pct=5)
    assert link.down


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ("[]", "expected a JSON object keyed by interface"),
        ('{"eth1": {"cable": "down"}}', "eth1: unknown field 'cable'"),
        ('{"eth1": {"impairments": {"loss_pct": "x"}}}', "eth1: impairments.loss_pct"),
    ],
)
def test_a_bad_annotation_names_the_object_and_the_annotation(text: str, message: str) -> None:
    with pytest.raises(ModelError) as error:
        Topology.from_dict(obj({}, {ANNOTATION: text}))
    assert str(error.value).startswith(f"topology lab/r1: metadata.annotation {ANNOTATION}: ")
    assert message in str(error.value)


def test_values_the_annotation_gives_are_range_checked_like_the_spec() -> None:
    annotation = {"eth1": {"impairments": {"delay_ms": 1, "jitter_ms": 2}}}
    topology = Topology.from_dict(obj({}, {ANNOTATION: json.dumps(annotation)}))
    (problem,) = validate_topology(topology).problems
    assert problem.field == "impairments.jitter_ms"


def crd_schema(path: Path) -> dict[str, Any]:
    schema: dict[str, Any] = yaml.safe_load(path.read_text())["spec"]["versions"][0]["schema"][
        "openAPIV3Schema"
    ]
    return schema


def test_where_kne_s_crd_prunes_the_fields_the_annotation_still_sets_them() -> None:
    (crd,) = files(CRDS, "kne-meshnet.yaml")
    link = {"uid": 4, "peer_pod": "r2", "local_intf": "eth1", "peer_intf": "eth1"}
    given = {"impairments": {"delay_ms": 20}, "state": "down"}
    body = {"spec": {"links": [link | given]}}
    pruned = sorted(schema_errors(crd_schema(crd), body))
    assert pruned == [
        ".spec.links[0].impairments: not in the schema (pruned by the API server)",
        ".spec.links[0].state: not in the schema (pruned by the API server)",
    ]
    # What such a server keeps: the link without them, and the object's annotations.
    kept = obj(link, {ANNOTATION: json.dumps({"eth1": given})})
    (read,) = Topology.from_dict(kept).links
    assert read.impairments == Impairments(delay_ms=20) and read.down
