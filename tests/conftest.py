"""Fixtures shared by the whole suite.

`server`: meshwire's embedded API on a private loopback address, per test.
`kube`: ONE real control plane (etcd + kube-apiserver, `kube_cluster.py`) for the
whole session, started at the first test that asks for it: starting one takes
seconds and half a gigabyte, so tests share it and keep to namespaces of their
own. Tests that kill, pause or compact a server start a private `ControlPlane`.
`kube_assets`: the folder with the binaries (built once by scripts/kube-assets.sh).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from meshwire.control.api.server import ApiServer
from tests.api_helpers import private_server
from tests.kube_cluster import ControlPlane, assets


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[ApiServer]:
    """meshwire's embedded API on a private loopback address, with its own database."""
    async with private_server(tmp_path) as running:
        yield running


@pytest.fixture(scope="session")
def kube_assets() -> Path:
    return assets()


@pytest.fixture(scope="session")
def kube(kube_assets: Path) -> Iterator[ControlPlane]:
    plane = ControlPlane(kube_assets)
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


# `make test` runs two pytest-xdist workers with --dist loadgroup. Tests that build
# labs (network namespaces, daemons, thousands of links) share one group, so no
# two labs ever run at once and none competes with another for the kernel's
# global neighbour table (a lab on the real kube-apiserver included); the real
# kube-apiserver's other tests share another group, so one control plane serves
# them. The real node (test_realnode_*: a module-scoped node, minutes to start) is a
# group of its own, so its tests run in order on one worker and start it once.
# Every other test runs on whichever worker is free.
_LAB_FILES = (
    "test_lab_",
    "test_scenario_",
    "test_graph_live",
    "test_wire_races",
    "test_kube_lab",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        name = item.path.name
        if name.startswith("test_realnode_"):
            # One real node for the module, its tests in order on one worker.
            item.add_marker(pytest.mark.xdist_group("realnode"))
        elif name.startswith(_LAB_FILES):
            item.add_marker(pytest.mark.xdist_group("lab"))
        elif name.startswith("test_kube_"):
            item.add_marker(pytest.mark.xdist_group("kube"))
