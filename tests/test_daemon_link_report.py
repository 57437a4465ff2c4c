"""`/links`: the node's link ends with their reconcile state, as an operator reads them."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import pytest
from links_helpers import grpc_row, veth_row

from meshwire.control.daemon.link_report import link_report
from meshwire.control.model.emulation import Impairments
from meshwire.control.tables.health import Health, State

VETH = veth_row("/run/netns/a", "/run/netns/b", uid=3, a_intf="eth2")
GRPC = grpc_row("/run/netns/a")
GRPC = replace(
    GRPC,
    local=replace(GRPC.local, mac="02:00:00:00:00:01"),
    peer=replace(GRPC.peer, mac="06:00:00:00:00:02"),
)
FAILED = Health(
    State.ERROR, "lab/5: r1:eth1: interface eth1 exists and meshwire did not create it", 4, True
)


def test_each_end_says_where_it_is_what_it_joins_and_why_it_fails() -> None:
    (veth, grpc) = link_report([(VETH, Health().done()), (GRPC, FAILED)])

    assert grpc == {
        "link": "lab/5",
        "key": "lab/5/r1",
        "kind": "grpc",
        "local": {
            "pod": "lab/r1",
            "intf": "eth1",
            "netns": "/run/netns/a",
            "mac": "02:00:00:00:00:01",
            "impairments": {},
        },
        "peer": {
            "pod": "lab/r2",
            "intf": "eth1",
            "netns": "",
            "mac": "06:00:00:00:00:02",
            "node_ip": "192.0.2.2",
            "impairments": {},
        },
        "cable": "up",
        "emulated": False,
        "state": "error",
        "error": FAILED.message,
        "attempts": 4,
        "permanent": True,
    }
    assert (veth["key"], veth["kind"], veth["state"], veth["error"]) == (
        "lab/3",
        "veth",
        "done",
        "",
    )
    assert veth["local"]["intf"] == "eth2" and veth["peer"]["node_ip"] == ""


def test_a_row_not_yet_attempted_is_pending() -> None:
    (entry,) = link_report([(VETH, Health())])
    assert (entry["state"], entry["attempts"]) == ("pending", 0)


def test_a_state_keeps_only_its_entries_and_an_unknown_one_is_refused() -> None:
    rows = [(GRPC, FAILED), (VETH, Health().done())]
    assert [e["key"] for e in link_report(rows, "error")] == [GRPC.key]
    assert [e["key"] for e in link_report(rows, "done")] == [VETH.key]
    with pytest.raises(ValueError, match="state 'broken' is not one of pending, done, error"):
        link_report([(VETH, FAILED)], "broken")


def test_each_end_shows_its_impairments_and_the_link_its_cable() -> None:
    row = dataclasses.replace(
        GRPC,
        local=dataclasses.replace(GRPC.local, impairments=Impairments(delay_ms=20, loss_pct=1.5)),
        peer=dataclasses.replace(GRPC.peer, impairments=Impairments(rate_mbps=100)),
        down=True,
        emulated=True,
    )
    (entry,) = link_report([(row, Health())])
    assert entry["emulated"]
    assert entry["local"]["impairments"] == {"delay_ms": 20, "loss_pct": 1.5}
    assert entry["peer"]["impairments"] == {"rate_mbps": 100}
    assert entry["cable"] == "down"
