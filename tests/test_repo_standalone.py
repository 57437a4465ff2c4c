"""The repository stands alone: nothing in it names a folder outside it.

A user's clone has only the repository, so no tracked file may name a path of
the machine it was built on, and the shipped test data must be there.
"""

import subprocess
from pathlib import Path

import pytest

from tests.paths import CRDS, MESHNET, REPO, files, meshnet_fixtures

# Spelled in two pieces so this file does not match itself.
OUTSIDE = ("/wo" + "rk/", "../sha" + "red")


def tracked_files() -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z"], check=True, capture_output=True
    ).stdout
    return [name for name in out.decode().split("\0") if name]


@pytest.mark.parametrize("needle", OUTSIDE)
def test_no_tracked_file_names_a_path_outside_the_repository(needle: str) -> None:
    offenders = []
    for name in tracked_files():
        path = REPO / name
        if not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        if needle in text:
            offenders.append(name)
    assert offenders == []


def test_meshnet_fixtures_ship_with_their_licence() -> None:
    names = [path.name for path in meshnet_fixtures()]
    assert "3node.yml" in names and "2node-1500links.yml" in names
    assert (MESHNET / "LICENSE").is_file()
    assert (MESHNET / "README.md").is_file()


def test_the_crds_clusters_have_ship_with_the_suite() -> None:
    assert [path.name for path in files(CRDS, "*.yaml")] == [
        "kne-meshnet.yaml",
        "meshnet-upstream.yaml",
    ]


def test_an_empty_folder_fails_loudly(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no \*\.yml"):
        files(tmp_path, "*.yml")
