"""Shared pieces of the deploy/ tests: the manifests as objects, and a CRD schema checker.

The manifests are read straight from `deploy/`, the way `kubectl apply -k`
would take them; nothing here talks to a cluster.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"

# kind -> the official client's model, used to check that no field is misspelt.
MODELS = {
    "Namespace": "V1Namespace",
    "CustomResourceDefinition": "V1CustomResourceDefinition",
    "ServiceAccount": "V1ServiceAccount",
    "ClusterRole": "V1ClusterRole",
    "ClusterRoleBinding": "V1ClusterRoleBinding",
    "ConfigMap": "V1ConfigMap",
    "DaemonSet": "V1DaemonSet",
}


def kustomization() -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert isinstance(data, dict)
    return data


def manifests() -> list[dict[str, Any]]:
    """Every object of every file the kustomization lists, in its order."""
    out: list[dict[str, Any]] = []
    for name in kustomization()["resources"]:
        for doc in yaml.safe_load_all((DEPLOY / name).read_text()):
            if doc is not None:
                out.append(doc)
    return out


def one(kind: str) -> dict[str, Any]:
    found = [obj for obj in manifests() if obj["kind"] == kind]
    assert len(found) == 1, f"expected one {kind} in deploy/, found {len(found)}"
    return found[0]


def named(kind: str, name: str) -> dict[str, Any]:
    found = [o for o in manifests() if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name} in deploy/, found {len(found)}"
    return found[0]


def round_trip(obj: dict[str, Any]) -> Any:
    """`obj` read into the official client's model and written back.

    Fields the model does not know (a misspelt key, a wrong nesting) are
    dropped on the way, so a manifest equal to its round trip has none.
    """
    api = client.ApiClient()
    try:
        model = api.deserialize(json.dumps(obj), MODELS[obj["kind"]], "application/json")
        return api.sanitize_for_serialization(model)  # type: ignore[no-untyped-call]
    finally:
        api.close()  # type: ignore[no-untyped-call]


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = one("DaemonSet")["spec"]["template"]["spec"]
    return spec


def container(name: str) -> dict[str, Any]:
    spec = pod_spec()
    for item in spec.get("initContainers", []) + spec["containers"]:
        if item["name"] == name:
            return dict(item)
    raise AssertionError(f"no container {name!r} in the DaemonSet")


def volume(name: str) -> dict[str, Any]:
    for item in pod_spec()["volumes"]:
        if item["name"] == name:
            return dict(item)
    raise AssertionError(f"no volume {name!r} in the DaemonSet")


def mount_of(container_spec: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """The volume mount under which `path` lies in the container, and the rest of the path."""
    best: dict[str, Any] | None = None
    for mount in container_spec.get("volumeMounts", []):
        root = mount["mountPath"].rstrip("/")
        if (path == root or path.startswith(root + "/")) and (
            best is None or len(root) > len(best["mountPath"])
        ):
            best = mount
    if best is None:
        raise AssertionError(f"{path} is on no volume of container {container_spec['name']}")
    return best, path[len(best["mountPath"].rstrip("/")) :].lstrip("/")


def config_text() -> str:
    text: str = one("ConfigMap")["data"]["config.yaml"]
    return text


def schema_errors(schema: dict[str, Any], value: Any, where: str = "") -> list[str]:
    """Where `value` breaks a CRD's structural schema (types, required, known fields).

    A field the schema does not list counts as an error: the API server
    prunes it silently, which is the drift these tests exist to catch.
    """
    kind = schema.get("type")
    errors: list[str] = []
    if kind == "object":
        if not isinstance(value, dict):
            return [f"{where or '.'}: expected an object, got {value!r}"]
        properties = schema.get("properties", {})
        errors += [f"{where}.{k}: required" for k in schema.get("required", []) if k not in value]
        for key, item in value.items():
            if key not in properties:
                errors.append(f"{where}.{key}: not in the schema (pruned by the API server)")
            else:
                errors += schema_errors(properties[key], item, f"{where}.{key}")
    elif kind == "array":
        if not isinstance(value, list):
            return [f"{where}: expected an array, got {value!r}"]
        for i, item in enumerate(value):
            errors += schema_errors(schema["items"], item, f"{where}[{i}]")
    elif kind == "string" and not isinstance(value, str):
        errors.append(f"{where}: expected a string, got {value!r}")
    elif kind == "integer" and (isinstance(value, bool) or not isinstance(value, int)):
        errors.append(f"{where}: expected an integer, got {value!r}")
    return errors
