"""The Topology CRD is meshnet's, and lists exactly the fields meshwire reads and writes.

A field the model wrote but the schema lacked would be pruned by the API
server without a word; a field in the schema the model ignored would be a
promise nobody keeps. These tests fail on either drift.
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_helpers import named, schema_errors

from meshwire.control.model.emulation import MAX_DELAY_MS, MAX_RATE_MBPS, STATES, Impairments
from meshwire.control.model.topology import (
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    Link,
    Skipped,
    Topology,
    TopologyStatus,
)
from meshwire.control.model.validate import MAX_MTU, MIN_MTU
from meshwire.control.reconcile.status_writer import STATUS_FIELDS
from tests.paths import MESHNET, meshnet_fixtures

FIXTURES = MESHNET
JSON_TYPES = {int: "integer", str: "string", float: "number", Impairments: "object"}


def crd() -> dict[str, Any]:
    return named("CustomResourceDefinition", f"{PLURAL}.{GROUP}")


def schema() -> dict[str, Any]:
    versions = crd()["spec"]["versions"]
    assert [v["name"] for v in versions] == [VERSION]
    found: dict[str, Any] = versions[0]["schema"]["openAPIV3Schema"]
    return found


def link_schema() -> dict[str, Any]:
    found: dict[str, Any] = schema()["properties"]["spec"]["properties"]["links"]["items"]
    return found


def status_schema() -> dict[str, Any]:
    found: dict[str, Any] = schema()["properties"]["status"]
    return found


def field_types(cls: type) -> dict[str, str]:
    hints = typing.get_type_hints(cls)
    return {
        f.name: JSON_TYPES.get(hints[f.name], "?")
        for f in dataclasses.fields(cls)
        if hints[f.name] in JSON_TYPES
    }


def test_the_crd_is_meshnets_namespaced_topology_with_a_status_subresource() -> None:
    spec = crd()["spec"]
    assert crd()["metadata"]["name"] == f"{PLURAL}.{GROUP}"
    assert spec["group"] == GROUP
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == KIND
    assert spec["names"]["plural"] == PLURAL
    assert spec["names"]["singular"] == "topology"
    assert "topo" in spec["names"]["shortNames"]
    version = spec["versions"][0]
    assert version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}


def test_a_link_has_exactly_the_models_fields_with_their_types() -> None:
    properties = link_schema()["properties"]
    assert {name: p["type"] for name, p in properties.items()} == field_types(Link)


def test_a_link_requires_what_the_model_cannot_default_as_meshnet_does() -> None:
    no_default = {
        f.name
        for f in dataclasses.fields(Link)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    assert (
        set(link_schema()["required"])
        == no_default
        == {
            "uid",
            "peer_pod",
            "local_intf",
            "peer_intf",
        }
    )


def test_the_status_has_exactly_the_models_fields() -> None:
    properties = status_schema()["properties"]
    assert set(properties) == {f.name for f in dataclasses.fields(TopologyStatus)}
    scalars = {name: p["type"] for name, p in properties.items() if name != "skipped"}
    assert scalars == field_types(TopologyStatus)
    skipped = properties["skipped"]
    assert skipped["type"] == "array"
    item = skipped["items"]["properties"]
    assert {name: p["type"] for name, p in item.items()} == field_types(Skipped)


def test_every_status_field_the_daemon_writes_is_in_the_schema() -> None:
    assert set(STATUS_FIELDS) <= set(status_schema()["properties"])


def test_a_topology_the_model_writes_with_every_field_set_fits_the_schema() -> None:
    topology = Topology.from_dict(
        {
            "metadata": {"name": "r1", "namespace": "lab"},
            "spec": {
                "links": [
                    {
                        "uid": 1,
                        "peer_pod": "r2",
                        "local_intf": "eth1",
                        "peer_intf": "eth1",
                        "local_ip": "10.0.0.1/24",
                        "peer_ip": "10.0.0.2/24",
                        "impairments": {
                            "delay_ms": 20,
                            "jitter_ms": 2.5,
                            "loss_pct": 1,
                            "corrupt_pct": 1,
                            "duplicate_pct": 1,
                            "reorder_pct": 1,
                            "rate_mbps": 100,
                        },
                        "state": "down",
                    }
                ]
            },
            "status": {
                "skipped": [{"pod_name": "r2", "link_id": 1}],
                "src_ip": "192.0.2.1",
                "net_ns": "/var/run/netns/cni-1",
                "container_id": "abc",
                "plumbing_error": "eth1: exists",
                "link_rebuilds": "link 1 (eth1): rebuilt onto the workers as its emulation "
                "began at 2026-01-05T10:00:00Z, one carrier flap",
            },
        }
    )
    written = topology.to_dict()
    body = {k: v for k, v in written.items() if k in ("spec", "status")}
    assert schema_errors(schema(), body) == []
    assert Topology.from_dict(written) == topology


def test_the_schema_checker_catches_a_field_the_server_would_prune() -> None:
    body = {"spec": {"links": [{"uid": 1, "peer_pod": "r2", "local_intf": "e", "peer_intf": "e"}]}}
    assert schema_errors(schema(), body) == []
    body["spec"]["links"][0]["mac"] = "02:00:00:00:00:01"
    assert schema_errors(schema(), body) == [
        ".spec.links[0].mac: not in the schema (pruned by the API server)"
    ]
    body["spec"]["links"][0] = {"uid": "1"}
    assert len(schema_errors(schema(), body)) == 4


@pytest.mark.parametrize("fixture", meshnet_fixtures(), ids=lambda p: p.name)
def test_meshnets_own_test_topologies_fit_the_schema(fixture: Path) -> None:
    topologies = []
    # libyaml's loader: the 1500-link fixtures take seconds with the pure-Python one.
    for doc in yaml.load_all(fixture.read_text(), Loader=yaml.CSafeLoader):
        for obj in doc.get("items", [doc]) if doc else []:
            if obj.get("kind") == KIND:
                topologies.append(obj)
    assert topologies
    for obj in topologies:
        body = {k: v for k, v in obj.items() if k in ("spec", "status")}
        assert schema_errors(schema(), body) == [], obj["metadata"]["name"]


def test_a_links_mtu_has_the_models_range() -> None:
    mtu = link_schema()["properties"]["mtu"]
    assert (mtu["minimum"], mtu["maximum"]) == (MIN_MTU, MAX_MTU)


def test_a_links_impairments_have_the_models_fields_ranges_and_states() -> None:
    link = link_schema()["properties"]
    properties = link["impairments"]["properties"]
    assert {name: p["type"] for name, p in properties.items()} == field_types(Impairments)
    maxima = {name: p["maximum"] for name, p in properties.items()}
    assert {name for name, top in maxima.items() if top == 100} == {
        name for name in properties if name.endswith("_pct")
    }
    assert maxima["delay_ms"] == MAX_DELAY_MS
    assert maxima["rate_mbps"] == MAX_RATE_MBPS
    assert all(p["minimum"] == 0 for p in properties.values())
    assert tuple(link["state"]["enum"]) == STATES
