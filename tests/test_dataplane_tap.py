"""Persistent TAPs in pod network namespaces (root)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from dataplane_helpers import netns_prefix, sh

from meshwire.dataplane.tap import TapError, TapSpec, open_tap_in, remove_tap_in, tap_info

pytestmark = pytest.mark.root


@pytest.fixture
def pod() -> Iterator[str]:
    with netns_prefix() as prefix:
        sh("ip", "netns", "add", f"{prefix}pod")
        yield f"{prefix}pod"


def link(netns: str, name: str) -> dict[str, Any]:
    shown: list[dict[str, Any]] = json.loads(
        sh("ip", "-j", "-d", "-n", netns, "link", "show", name)
    )
    return shown[0]


def test_a_tap_outlives_its_fd_and_is_re_attached_by_name_with_its_settings(pod: str) -> None:
    path = f"/var/run/netns/{pod}"
    fd = open_tap_in(path, TapSpec("eth1", mtu=9000, offloads=True))
    index = link(pod, "eth1")["ifindex"]
    os.close(fd)

    assert link(pod, "eth1")["ifindex"] == index
    fd = open_tap_in(path, TapSpec("eth1", mtu=9000, offloads=True))
    try:
        shown = link(pod, "eth1")
        assert shown["ifindex"] == index
        assert shown["mtu"] == 9000
        assert shown["gso_max_size"] < 65535  # a TSO frame fits a batch's u16 length
        assert tap_info(fd) == ("eth1", True)
    finally:
        os.close(fd)


def test_removing_a_tap_deletes_it_and_removing_it_again_is_success(pod: str) -> None:
    path = f"/var/run/netns/{pod}"
    fd = open_tap_in(path, TapSpec("eth2", offloads=False))
    try:
        remove_tap_in(path, "eth2")
        assert "eth2" not in sh("ip", "-n", pod, "-o", "link")
        remove_tap_in(path, "eth2")
    finally:
        os.close(fd)


def test_a_name_taken_by_another_kind_of_interface_is_refused_naming_it(pod: str) -> None:
    sh("ip", "-n", pod, "link", "add", "eth3", "type", "veth", "peer", "name", "eth3p")
    with pytest.raises(TapError, match="TAP eth3"):
        open_tap_in(f"/var/run/netns/{pod}", TapSpec("eth3"))
    assert link(pod, "eth3")["ifname"] == "eth3"


def test_bad_specs_are_refused_before_touching_the_kernel(pod: str) -> None:
    path = f"/var/run/netns/{pod}"
    with pytest.raises(TapError, match="mtu 70000"):
        open_tap_in(path, TapSpec("eth1", mtu=70000))
    with pytest.raises(TapError, match="1 to 15 bytes"):
        open_tap_in(path, TapSpec("a-very-long-interface-name"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        open_tap_in(f"{path}-missing", TapSpec("eth1"))
