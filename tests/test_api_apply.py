"""`meshwire apply` and `meshwire delete` against the embedded API: meshnet's own
test topologies load unchanged and read back identical through the official
clients, and the file that made them removes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from meshwire.control.model.topology import PLURAL
from meshwire.tools.api.server import ApiServer
from meshwire.tools.client import apply_command, delete_command
from tests.api_helpers import (
    FIXTURES,
    TOPOLOGIES,
    aio_api,
    call,
    get,
    sync_api,
    topology,
)
from tests.paths import meshnet_fixtures


def as_written(item: dict[str, Any]) -> dict[str, Any]:
    """What a user wrote of a Topology, without what the server adds to metadata.

    The meshnet fixtures set only apiVersion, kind, metadata name (and
    namespace) and spec; anything else the server returned, such as a status,
    would show up here as a difference.
    """
    meta = item["metadata"]
    rest = {k: v for k, v in item.items() if k != "metadata"}
    return {
        **rest,
        "metadata": {"namespace": meta.get("namespace", "default"), "name": meta["name"]},
    }


def topologies_in(path: Path) -> dict[tuple[str, str], Any]:
    """(namespace, name) -> every Topology in a meshnet YAML file as written, read plainly."""
    out: dict[tuple[str, str], Any] = {}
    for doc in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader):
        for item in (doc or {}).get("items", [doc]) if (doc or {}).get("kind") == "List" else [doc]:
            if item and item.get("kind") == "Topology":
                written = as_written(item)
                out[(written["metadata"]["namespace"], written["metadata"]["name"])] = written
    return out


def names(listed: dict[str, Any]) -> list[str]:
    return [item["metadata"]["name"] for item in listed["items"]]


async def run_apply(*argv: str) -> int:
    code: int = await call(apply_command.main, list(argv))
    return code


async def run_delete(*argv: str) -> int:
    code: int = await call(delete_command.main, list(argv))
    return code


@pytest.mark.parametrize("fixture", meshnet_fixtures(), ids=lambda p: p.name)
async def test_meshnet_topologies_read_back_identical(
    server: ApiServer, fixture: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = topologies_in(fixture)
    assert expected, f"{fixture.name} has no Topology"

    assert await run_apply("-f", str(fixture), "--server", server.url) == 0

    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"topology.networkop.co.uk/{name} created" for _, name in expected]
    items = (await call(sync_api(server.url).list_cluster_custom_object, *TOPOLOGIES, PLURAL))[
        "items"
    ]
    async with aio_api(server.url) as aio:
        aio_items = (await aio.list_cluster_custom_object(*TOPOLOGIES, PLURAL))["items"]
    for listed in (items, aio_items):
        found = {(i["metadata"]["namespace"], i["metadata"]["name"]): as_written(i) for i in listed}
        assert found == expected


async def test_apply_again_is_unchanged_and_a_changed_spec_keeps_status(
    server: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = sync_api(server.url)
    lab = tmp_path / "lab.yml"
    lab.write_text(yaml.safe_dump_all([topology("r1", "r2"), topology("r2", "r1")]))
    assert await run_apply("-f", str(lab), "--server", server.url) == 0
    await call(
        api.patch_namespaced_custom_object_status,
        *TOPOLOGIES,
        "default",
        PLURAL,
        "r1",
        {"status": {"src_ip": "10.0.0.1"}},
    )
    assert await run_apply("-f", str(lab), "--server", server.url) == 0
    lab.write_text(yaml.safe_dump_all([topology("r1", "r2", "r3"), topology("r2", "r1")]))
    assert await run_apply("-f", str(lab), "--server", server.url) == 0

    assert capsys.readouterr().out.splitlines() == [
        "topology.networkop.co.uk/r1 created",
        "topology.networkop.co.uk/r2 created",
        "topology.networkop.co.uk/r1 unchanged",
        "topology.networkop.co.uk/r2 unchanged",
        "topology.networkop.co.uk/r1 configured",
        "topology.networkop.co.uk/r2 unchanged",
    ]
    r1 = await call(get, api, "r1")
    assert r1["spec"] == topology("r1", "r2", "r3")["spec"]
    assert r1["status"] == {"src_ip": "10.0.0.1"}


async def test_an_invalid_object_fails_by_name_and_the_rest_still_apply(
    server: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = topology("bad", "r2")
    bad["spec"]["links"][0]["uid"] = -1
    lab = tmp_path / "lab.yml"
    lab.write_text(yaml.safe_dump_all([bad, topology("good", "r2")]))

    assert await run_apply("-f", str(lab), "--server", server.url) == 1

    out, err = capsys.readouterr()
    assert out.splitlines() == ["topology.networkop.co.uk/good created"]
    assert "topology default/bad: 422" in err
    assert "spec.links[0]" in err


async def test_a_namespace_other_than_the_file_says_is_refused(
    server: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    fixture = str(FIXTURES / "3node-mlink.yml")
    assert await run_apply("-f", fixture, "--server", server.url, "-n", "default") == 2
    assert "does not match -n 'default'" in capsys.readouterr().err
    assert await run_apply("-f", fixture, "--server", server.url, "-n", "mlink") == 0


async def test_a_containerlab_file_applies_as_one_topology_per_linked_node(
    server: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    lab = Path(__file__).parent / "data" / "trio.clab.yml"
    assert await run_apply("-f", str(lab), "--server", server.url, "-n", "trio") == 0

    created = capsys.readouterr().out.splitlines()
    listed = await call(
        sync_api(server.url).list_namespaced_custom_object, *TOPOLOGIES, "trio", PLURAL
    )
    assert created == [f"topology.networkop.co.uk/{name} created" for name in names(listed)]
    assert names(listed) == ["r1", "r2", "r3"]


async def test_delete_removes_what_the_same_file_applied_and_again_finds_nothing(
    server: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lab = tmp_path / "lab.yml"
    lab.write_text(yaml.safe_dump_all([topology("r1", "r2"), topology("r2", "r1")]))
    other = tmp_path / "other.yml"
    other.write_text(yaml.safe_dump_all([topology("r9", "r1")]))
    assert await run_apply("-f", str(lab), "--server", server.url) == 0
    assert await run_apply("-f", str(other), "--server", server.url) == 0
    capsys.readouterr()

    assert await run_delete("-f", str(lab), "--server", server.url) == 0
    assert capsys.readouterr().out.splitlines() == [
        "topology.networkop.co.uk/r1 deleted",
        "topology.networkop.co.uk/r2 deleted",
    ]
    listed = await call(sync_api(server.url).list_cluster_custom_object, *TOPOLOGIES, PLURAL)
    assert names(listed) == ["r9"]  # what another file made stays

    assert await run_delete("-f", str(lab), "--server", server.url) == 0
    assert capsys.readouterr().out.splitlines() == [
        "topology.networkop.co.uk/r1 not found",
        "topology.networkop.co.uk/r2 not found",
    ]


async def test_delete_of_an_unreadable_file_or_a_wrong_namespace_touches_nothing(
    server: ApiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixture = str(FIXTURES / "3node-mlink.yml")
    assert await run_apply("-f", fixture, "--server", server.url) == 0
    missing = tmp_path / "missing.yml"
    assert await run_delete("-f", str(missing), "--server", server.url) == 2
    assert "missing.yml" in capsys.readouterr().err
    assert await run_delete("-f", fixture, "--server", server.url, "-n", "default") == 2
    assert "does not match -n 'default'" in capsys.readouterr().err
    listed = await call(sync_api(server.url).list_cluster_custom_object, *TOPOLOGIES, PLURAL)
    assert len(listed["items"]) == len(topologies_in(FIXTURES / "3node-mlink.yml"))
