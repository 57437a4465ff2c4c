"""The sandbox store: what a node added and has not deleted, as a restarted daemon reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from meshwire.control.daemon.sandbox_store import Sandbox, SandboxStore


@pytest.fixture
def netns(tmp_path: Path) -> str:
    """A path standing for a pod's netns that exists."""
    path = tmp_path / "netns-b"
    path.touch()
    return str(path)


def test_a_saved_sandbox_is_loaded_by_a_new_store_on_the_same_directory(
    tmp_path: Path, netns: str
) -> None:
    SandboxStore(tmp_path / "state").save("default/r1", Sandbox("b", netns))
    assert SandboxStore(tmp_path / "state").load() == {"default/r1": Sandbox("b", netns)}


def test_saving_again_replaces_and_removing_forgets(tmp_path: Path, netns: str) -> None:
    store = SandboxStore(tmp_path / "state")
    store.save("default/r1", Sandbox("a", netns))
    store.save("default/r1", Sandbox("b", netns))
    store.save("lab/r1", Sandbox("c", netns))
    assert store.load() == {"default/r1": Sandbox("b", netns), "lab/r1": Sandbox("c", netns)}
    store.remove("default/r1")
    store.remove("default/never-added")
    assert store.load() == {"lab/r1": Sandbox("c", netns)}


def test_a_sandbox_whose_netns_is_gone_is_dropped_and_its_record_removed(
    tmp_path: Path, netns: str
) -> None:
    store = SandboxStore(tmp_path / "state")
    store.save("default/r1", Sandbox("b", netns))
    store.save("default/r2", Sandbox("c", str(tmp_path / "netns-gone")))
    assert store.load() == {"default/r1": Sandbox("b", netns)}
    assert len(list((tmp_path / "state").iterdir())) == 1


@pytest.mark.parametrize(
    "body",
    ["", "{not json", "[]", json.dumps({"pod": "default/r1", "container_id": "b"}),
     json.dumps({"pod": "default/r1", "container_id": 5, "netns": "/x"})],
)  # fmt: skip
def test_an_unreadable_record_is_dropped_and_the_others_kept(
    tmp_path: Path, netns: str, body: str
) -> None:
    store = SandboxStore(tmp_path / "state")
    store.save("default/r1", Sandbox("b", netns))
    (tmp_path / "state" / "broken.json").write_text(body)
    assert store.load() == {"default/r1": Sandbox("b", netns)}
    assert not (tmp_path / "state" / "broken.json").exists()


def test_a_directory_not_made_yet_holds_nothing(tmp_path: Path) -> None:
    assert SandboxStore(tmp_path / "absent").load() == {}


def test_a_record_that_cannot_be_written_is_logged_not_raised(
    tmp_path: Path, netns: str, caplog: pytest.LogCaptureFixture
) -> None:
    occupied = tmp_path / "file"
    occupied.write_text("")  # the directory's path is taken by a file
    SandboxStore(occupied).save("default/r1", Sandbox("b", netns))
    assert "cannot record its sandbox" in caplog.text


def test_pod_keys_map_to_distinct_files(tmp_path: Path, netns: str) -> None:
    store = SandboxStore(tmp_path / "state")
    keys = ["a/b.c", "a.b/c", "a/b%2Fc", "a%2Fb/c"]
    for i, key in enumerate(keys):
        store.save(key, Sandbox(str(i), netns))
    assert store.load() == {key: Sandbox(str(i), netns) for i, key in enumerate(keys)}


def test_the_cni_network_of_the_add_is_kept_and_a_record_without_one_reads_as_unknown(
    tmp_path: Path, netns: str
) -> None:
    store = SandboxStore(tmp_path / "state")
    store.save("default/r1", Sandbox("b", netns, "kindnet"))
    body = {"pod": "default/r2", "container_id": "c", "netns": netns}
    (tmp_path / "state" / "r2.json").write_text(json.dumps(body))
    assert store.load() == {
        "default/r1": Sandbox("b", netns, "kindnet"),
        "default/r2": Sandbox("c", netns, ""),
    }


def test_a_deleted_sandbox_is_remembered_until_forgotten(tmp_path: Path, netns: str) -> None:
    store = SandboxStore(tmp_path / "state")
    store.save("default/r1", Sandbox("c", netns))
    assert store.mark_deleted("default/r1", "a")
    assert store.mark_deleted("default/r1", "b")
    assert store.mark_deleted("lab/r1", "a")
    again = SandboxStore(tmp_path / "state")
    assert again.load_deleted() == {("default/r1", "a"), ("default/r1", "b"), ("lab/r1", "a")}
    assert again.load() == {"default/r1": Sandbox("c", netns)}  # the two kinds apart
    again.forget_deleted("default/r1", "a")
    again.forget_deleted("default/r1", "never-deleted")
    assert again.load_deleted() == {("default/r1", "b"), ("lab/r1", "a")}


def test_an_unreadable_record_of_a_del_is_dropped(tmp_path: Path) -> None:
    store = SandboxStore(tmp_path / "state")
    store.mark_deleted("default/r1", "a")
    (tmp_path / "state" / "broken.deleted").write_text(json.dumps({"pod": "default/r2"}))
    assert store.load_deleted() == {("default/r1", "a")}
    assert not (tmp_path / "state" / "broken.deleted").exists()


def test_a_del_that_cannot_be_recorded_says_so(tmp_path: Path) -> None:
    (tmp_path / "file").touch()
    assert not SandboxStore(tmp_path / "file").mark_deleted("default/r1", "a")
