"""Fixtures shared by the whole suite.

`server`: meshwire's embedded API on a private loopback address, per test.
`kube`: ONE real control plane (etcd + kube-apiserver, `kube_cluster.py`) for the
session of each pytest-xdist worker, started at the first test that asks for it:
starting one takes seconds and half a gigabyte, so tests share it and keep to
namespaces of their own. Tests that kill, pause or compact a server start a private `ControlPlane`.
`kube_assets`: the folder with the binaries (built once by scripts/kube-assets.sh).
`meshwire_image`: the DaemonSet's image archive for the real-node tests (scripts/image.sh).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from meshwire.tools.api.server import ApiServer
from tests.api_helpers import private_server
from tests.kube_cluster import ControlPlane, assets
from tests.paths import REPO


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[ApiServer]:
    """meshwire's embedded API on a private loopback address, with its own database."""
    async with private_server(tmp_path) as running:
        yield running


@pytest.fixture(scope="session")
def kube_assets() -> Path:
    return assets()


@pytest.fixture(scope="session")
def meshwire_image() -> Path:
    """The DaemonSet's image, built as docs/deploying.md says (`make image` runs this script).

    `make test` builds it before pytest and names it in MW_TEST_IMAGE; the script
    returns at once when the archive's inputs have not changed since.
    """
    out = Path(os.environ.get("MW_TEST_IMAGE") or REPO / "build" / "meshwire-image.tar")
    if not out.is_absolute():
        out = REPO / out
    subprocess.run(["bash", str(REPO / "scripts" / "image.sh"), str(out)], check=True)
    return out


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
