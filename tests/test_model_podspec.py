"""What lab files say about their pods' software (control/model/podspec.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshwire.control.model.labfile import LoadError
from meshwire.control.model.podspec import Bind, PodFile, PodSpec, software_from_text

CLAB = """\
name: lab
topology:
  defaults:
    env: {COLOR: blue, LEVEL: 1}
    binds: [shared:/srv/shared:ro]
  kinds:
    linux:
      exec: ["echo from-kind"]
  nodes:
    r1:
      kind: linux
      image: alpine
      cmd: sh -c 'exec sleep 1000'
      exec:
        - ip addr add 10.0.0.1/32 dev lo
        - "sh -c 'echo two words'"
      binds:
        - r1/frr:/etc/frr
      env: {LEVEL: 2}
      labels: {a: b}
    r2:
      kind: linux
      image: alpine
      labels: {a: b}
    sw: {kind: bridge}
  links:
    - endpoints: ["r1:eth1", "r2:eth1"]
"""


def test_containerlab_cmd_exec_binds_and_env_with_defaults_and_kinds(tmp_path: Path) -> None:
    software = software_from_text(CLAB, "lab.clab.yml", tmp_path)
    assert software.specs["r1"] == PodSpec(
        cmd=("sh", "-c", "exec sleep 1000"),
        exec=(("ip", "addr", "add", "10.0.0.1/32", "dev", "lo"), ("sh", "-c", "echo two words")),
        binds=(
            Bind(str(tmp_path / "shared"), "/srv/shared", read_only=True),
            Bind(str(tmp_path / "r1" / "frr"), "/etc/frr"),
        ),
        env=(("COLOR", "blue"), ("LEVEL", "2")),
        image="alpine",
    )
    assert software.specs["r2"].exec == (("echo", "from-kind"),)
    assert "sw" not in software.specs


def test_fields_not_run_are_reported_once_each_with_their_nodes(tmp_path: Path) -> None:
    warnings = software_from_text(CLAB, "lab.clab.yml", tmp_path).warnings
    assert warnings == ["lab.clab.yml: labels (nodes r1, r2): not run by meshwire"]


def test_an_image_is_a_reference_or_an_archive_beside_the_lab_file(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "frr.tar").write_bytes(b"")
    text = """\
name: lab
topology:
  kinds:
    linux: {image: "docker.io/frrouting/frr:v8.4.0"}
  nodes:
    r1: {kind: linux}
    r2: {kind: linux, image: images/frr.tar}
    r3: {kind: linux, image: ./images/frr.tar, cmd: sleep 1}
"""
    specs = software_from_text(text, "lab.clab.yml", tmp_path).specs
    assert specs["r1"].image == "docker.io/frrouting/frr:v8.4.0"
    assert not specs["r1"].image_is_archive
    assert specs["r2"].image == specs["r3"].image == str(tmp_path / "images" / "frr.tar")
    assert specs["r3"].image_is_archive and specs["r3"].keeps_entrypoint


@pytest.mark.parametrize(
    ("image", "message"),
    [
        ("missing.tar", "topology.nodes.r1.image: image archive "),
        ("'a b'", "topology.nodes.r1.image: expected an image reference or archive path"),
        ("[x]", "topology.nodes.r1.image: expected an image reference or archive path"),
    ],
)
def test_a_wrong_image_names_its_place(tmp_path: Path, image: str, message: str) -> None:
    text = f"name: lab\ntopology:\n  nodes:\n    r1: {{image: {image}}}\n"
    with pytest.raises(LoadError, match=message):
        software_from_text(text, "lab.clab.yml", tmp_path)


def test_a_spec_survives_the_state_file(tmp_path: Path) -> None:
    spec = software_from_text(CLAB, "lab.clab.yml", tmp_path).specs["r1"]
    assert PodSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ("{binds: [conf:etc/frr]}", "topology.nodes.r1.binds[0]: the pod path 'etc/frr' must be"),
        ("{binds: [conf]}", 'topology.nodes.r1.binds[0]: expected "HOST:POD[:ro]"'),
        ("{binds: ['a:/b:rx']}", 'topology.nodes.r1.binds[0]: expected "HOST:POD[:ro]"'),
        ("{cmd: 3}", "topology.nodes.r1.cmd: expected a command"),
        ('{cmd: "sh -c \'x"}', "topology.nodes.r1.cmd: command"),
        ("{exec: ls}", "topology.nodes.r1.exec: expected a list"),
        ("{env: [A]}", "topology.nodes.r1.env: expected a mapping"),
        ("{env: {A: {b: c}}}", "topology.nodes.r1.env.A: expected a value"),
    ],
)
def test_wrong_fields_name_file_line_and_place(tmp_path: Path, node: str, message: str) -> None:
    text = f"name: lab\ntopology:\n  nodes:\n    r1: {node}\n"
    with pytest.raises(LoadError) as caught:
        software_from_text(text, "lab.clab.yml", tmp_path)
    assert str(caught.value).startswith("lab.clab.yml:4: ")
    assert message in str(caught.value)


KNE_YAML = """\
name: kl
nodes:
  - name: r1
    vendor: HOST
    config:
      image: frr
      command: [/bin/sh]
      args: [-c, exec sleep 1000]
      env: {A: b}
      config_path: /etc/frr
      config_file: frr.conf
      data: "hostname r1\\n"
  - name: r2
    config:
      config_path: /etc/frr
      config_file: frr.conf
      file: r2.conf
links:
  - {a_node: r1, a_int: eth1, z_node: r2, z_int: eth1}
"""


def test_kne_yaml_command_args_env_and_config_files(tmp_path: Path) -> None:
    (tmp_path / "r2.conf").write_text("hostname r2\n")
    software = software_from_text(KNE_YAML, "lab.kne.yaml", tmp_path)
    assert software.specs["r1"] == PodSpec(
        cmd=("/bin/sh", "-c", "exec sleep 1000"),
        env=(("A", "b"),),
        files=(PodFile("/etc/frr", "frr.conf", "hostname r1\n"),),
        image="frr",
        keeps_entrypoint=False,  # `command` replaces the image's Entrypoint, as in Kubernetes
    )
    assert software.specs["r2"].files == (PodFile("/etc/frr", "frr.conf", "hostname r2\n"),)
    places = [w.split(":")[1].strip() for w in software.warnings]
    assert places == ["vendor (nodes r1)"]


def test_kne_text_protobuf_gives_the_same_specs(tmp_path: Path) -> None:
    text = """
name: "kl"
nodes {
  name: "r1"
  config {
    command: "/bin/sh"
    args: "-c"
    args: "exec sleep 1000"
    env { key: "A" value: "b" }
    config_path: "/etc/frr"
    config_file: "frr.conf"
    data: "hostname r1\\n"
  }
}
links { a_node: "r1" a_int: "eth1" z_node: "r2" z_int: "eth1" }
"""
    software = software_from_text(text, "lab.pb.txt", tmp_path)
    assert software.specs["r1"] == PodSpec(
        cmd=("/bin/sh", "-c", "exec sleep 1000"),
        env=(("A", "b"),),
        files=(PodFile("/etc/frr", "frr.conf", "hostname r1\n"),),
        keeps_entrypoint=False,
    )
    assert software.warnings == []


def test_kne_config_file_needs_its_place(tmp_path: Path) -> None:
    text = "name: kl\nnodes:\n  - name: r1\n    config: {data: x, config_file: f}\n"
    with pytest.raises(LoadError, match=r"nodes\[0\].config.config_path: required"):
        software_from_text(text, "lab.kne.yaml", tmp_path)


def test_meshnet_yaml_has_no_software(tmp_path: Path) -> None:
    text = (
        "apiVersion: networkop.co.uk/v1beta1\nkind: Topology\nmetadata: {name: r1}\n"
        "spec: {links: []}\n"
    )
    software = software_from_text(text, "lab.yml", tmp_path)
    assert software.specs == {} and software.warnings == []
