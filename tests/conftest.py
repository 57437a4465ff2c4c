"""Fixtures shared by the whole suite.

`server`: meshwire's embedded API on a private loopback address, per test.
`kube`: ONE real control plane (etcd + kube-apiserver, `kube_cluster.py`) for the
session of each pytest-xdist worker, started at the first test that asks for it:
starting one takes seconds and half a gigabyte, so tests share it and keep to
namespaces of their own. Tests that kill, pause or compact a server start a private `ControlPlane`.
`kube_assets`: the folder with the binaries (built once by scripts/kube-assets.sh).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from meshwire.tools.api.server import ApiServer
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


# `make test` runs two pytest-xdist workers with --dist loadfile: each file's tests run
# in order on one worker, so a module-scoped fixture (the real node of
# test_realnode_*, a lab) is set up once. (pytest-xdist 3.8's loadgroup does not
# group under pytest 9: the worker's nodeid suffix is lost, so groups cannot be
# relied on.) Tests of two files may run at once: every netns, link, process and
# port a test makes carries a unique prefix. The 1,500-link labs (marker `scale`),
# whose checks fill the kernel's one neighbour table, run alone after the rest.
