"""deploy/ is complete and every object is a well-formed Kubernetes object.

`kubectl apply -k deploy/` takes the files the kustomization lists; each
object must survive a trip through the official client's model, so a
misspelt or misplaced field (which the API server would drop or reject)
fails here. The image is not built in these tests (no container runtime):
its Dockerfile is only checked against the repository it copies.
"""

from __future__ import annotations

import fnmatch
import re

import pytest
import yaml
from deploy_helpers import DEPLOY, MODELS, kustomization, manifests, one, round_trip

from meshwire.control.cni.install import DEFAULT_SHIM

REPO = DEPLOY.parent


def test_the_kustomization_lists_every_manifest_in_deploy() -> None:
    listed = kustomization()["resources"]
    on_disk = sorted(p.name for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(listed) == on_disk
    assert listed.index("namespace.yaml") < listed.index("rbac.yaml")


def test_the_kustomization_names_the_image_the_daemonset_uses() -> None:
    image = one("DaemonSet")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.partition(":")[0] in [i["name"] for i in kustomization()["images"]]


def test_deploy_holds_one_of_each_object_meshwire_needs_and_both_crds() -> None:
    kinds = sorted(obj["kind"] for obj in manifests())
    assert kinds == sorted([*MODELS, "CustomResourceDefinition"])
    crds = {o["metadata"]["name"] for o in manifests() if o["kind"] == "CustomResourceDefinition"}
    assert crds == {"topologies.networkop.co.uk", "idallocations.meshwire.dev"}


@pytest.mark.parametrize(
    "index",
    range(len(manifests())),
    ids=lambda i: "{kind}-{metadata[name]}".format(**manifests()[i]),
)
def test_each_object_has_only_fields_kubernetes_knows(index: int) -> None:
    obj = manifests()[index]
    assert round_trip(obj) == obj


def test_the_round_trip_drops_a_misspelt_field() -> None:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "dta": {"a": "b"}}
    assert round_trip(obj) != obj


def test_the_daemonsets_selector_matches_its_pods() -> None:
    daemonset = one("DaemonSet")["spec"]
    labels = daemonset["template"]["metadata"]["labels"]
    assert daemonset["selector"]["matchLabels"].items() <= labels.items()


def test_the_configmap_the_daemonset_mounts_is_the_one_deploy_creates() -> None:
    volumes = one("DaemonSet")["spec"]["template"]["spec"]["volumes"]
    names = [v["configMap"]["name"] for v in volumes if "configMap" in v]
    assert names == [one("ConfigMap")["metadata"]["name"]]
    assert yaml.safe_load(one("ConfigMap")["data"]["config.yaml"])


def dockerfile() -> str:
    return (DEPLOY / "Dockerfile").read_text()


def test_the_image_is_bookworm_slim_and_builds_the_compiled_parts() -> None:
    assert re.findall(r"^FROM (\S+)", dockerfile(), re.M)[-1] == "debian:bookworm-slim"
    assert "bash scripts/build.sh" in dockerfile()


def test_both_stages_build_on_the_same_pinned_debian_release() -> None:
    # An unpinned tag moved from bookworm to trixie under us: the build stage
    # and the runtime must agree on libc and libnghttp2.
    bases = {line.split()[0] for line in re.findall(r"^FROM (.+)$", dockerfile(), re.M)}
    assert bases == {"debian:bookworm-slim"}


def image_script() -> str:
    return (REPO / "scripts" / "image.sh").read_text()


def test_make_image_copies_what_the_dockerfile_copies() -> None:
    copied = []
    for line in re.findall(r"^COPY (?!--from)(.+)$", dockerfile(), re.M):
        *sources, _ = line.split()
        copied += sources
    (sources,) = re.findall(r"^SOURCES=\((.*)\)$", image_script(), re.M)
    assert sorted(sources.split()) == sorted(copied)


def test_make_image_installs_the_runtime_packages_the_dockerfile_installs() -> None:
    runtime = dockerfile().split("\nFROM ")[-1]
    (installed,) = re.findall(r"--no-install-recommends ([^\\&]+)", runtime)
    (packages,) = re.findall(r"^RUNTIME_PKGS=(\S+)$", image_script(), re.M)
    assert sorted(installed.split()) == sorted(packages.split(","))
    assert re.search(r"^SUITE=bookworm$", image_script(), re.M)


def dockerignored() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip().rstrip("/") for line in lines if line.strip() and not line.startswith("#")]


def test_the_build_context_leaves_out_checkout_leftovers_but_nothing_the_image_copies() -> None:
    ignored = dockerignored()
    assert {".git", ".venv", "cext/build"} <= set(ignored)
    for line in re.findall(r"^COPY (?!--from)(.+)$", dockerfile(), re.M):
        *sources, _ = line.split()
        for source in sources:
            assert not any(fnmatch.fnmatch(source, pattern) for pattern in ignored), source


def test_the_dockerfile_copies_only_what_exists_in_the_repository() -> None:
    for line in re.findall(r"^COPY (?!--from)(.+)$", dockerfile(), re.M):
        *sources, _ = line.split()
        for source in sources:
            assert (REPO / source).exists(), source


def test_the_image_puts_the_shim_where_cni_install_looks_for_it() -> None:
    workdir = re.findall(r"^WORKDIR (\S+)", dockerfile(), re.M)[0]
    shim = DEFAULT_SHIM.relative_to(REPO)
    assert f"test -x {shim}" in dockerfile()
    assert f"ENV PATH={workdir}/.venv/bin:" in dockerfile()
