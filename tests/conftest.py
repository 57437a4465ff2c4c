"""Fixtures shared across test files.

`kube`: ONE real control plane (etcd + kube-apiserver, `kube_cluster.py`) for the
whole session, started at the first test that asks for it: starting one takes
seconds and half a gigabyte, so tests share it and keep to namespaces of their
own. Tests that kill, pause or compact a server start a private `ControlPlane`.
`kube_assets`: the folder with the binaries (built once by scripts/kube-assets.sh).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube_cluster import ControlPlane, assets


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
