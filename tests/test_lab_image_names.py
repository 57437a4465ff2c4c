"""What an image pod runs, decided without containerd (tools/lab/images.py)."""

from __future__ import annotations

import pytest

from meshwire.tools.lab.images import (
    environment,
    imported,
    normalize,
    pick_manifest,
    process_args,
)


@pytest.mark.parametrize(
    ("written", "stored"),
    [
        ("frr", "docker.io/library/frr:latest"),
        ("frr:8.4", "docker.io/library/frr:8.4"),
        ("frrouting/frr:v8.4.0", "docker.io/frrouting/frr:v8.4.0"),
        ("meshwire.test/box:1", "meshwire.test/box:1"),
        ("localhost/box", "localhost/box:latest"),
        ("registry:5000/box", "registry:5000/box:latest"),
        ("alpine@sha256:" + "a" * 64, "docker.io/library/alpine@sha256:" + "a" * 64),
    ],
)
def test_a_reference_gets_the_name_containerd_stores_it_under(written: str, stored: str) -> None:
    assert normalize(written) == stored


IMAGE = {"Entrypoint": ["/bin/entry"], "Cmd": ["sh"], "Env": ["PATH=/bin", "A=image"]}


def test_without_a_cmd_the_image_runs_its_own_entrypoint_and_cmd() -> None:
    assert process_args(IMAGE, (), keeps_entrypoint=True) is None


def test_a_cmd_replaces_the_images_cmd_and_keeps_its_entrypoint_as_docker_does() -> None:
    assert process_args(IMAGE, ("sleep", "1"), keeps_entrypoint=True) == [
        "/bin/entry",
        "sleep",
        "1",
    ]
    assert process_args({}, ("sleep", "1"), keeps_entrypoint=True) == ["sleep", "1"]


def test_a_kne_command_replaces_the_entrypoint_too_as_kubernetes_does() -> None:
    assert process_args(IMAGE, ("sleep", "1"), keeps_entrypoint=False) == ["sleep", "1"]


def test_the_lab_files_env_goes_over_the_images() -> None:
    assert environment(IMAGE, (("A", "lab"), ("HOSTNAME", "r1"))) == {
        "PATH": "/bin",
        "A": "lab",
        "HOSTNAME": "r1",
    }


def test_a_multi_platform_index_gives_this_machines_manifest() -> None:
    index = {
        "manifests": [
            {"digest": "sha256:arm", "platform": {"os": "linux", "architecture": "arm64"}},
            {"digest": "sha256:amd", "platform": {"os": "linux", "architecture": "amd64"}},
        ]
    }
    assert pick_manifest(index, "amd64") == "sha256:amd"
    with pytest.raises(ValueError, match=r"no linux/s390x image in it \(it has linux/arm64"):
        pick_manifest(index, "s390x")


def test_the_imported_images_are_read_from_ctrs_output() -> None:
    digest = "0" * 64
    out = f"unpacking meshwire.test/box:1 (sha256:{digest})...done\n"
    assert imported(out) == ["meshwire.test/box:1"]
    assert imported("") == []
