"""deploy/'s objects as `kubectl apply -k deploy/` sends them, through the official client.

`objects(image=...)` reads deploy/kustomization.yaml: its `resources` in order, and its
`images` rewrite (kustomize's: a container whose image is `name[:tag]` gets `newName` and
`newTag`), with `image` replacing that rewrite's result when given. `apply` creates or
replaces them in that order; `delete` removes them in that order too, as `kubectl delete -k`
does (the namespace first: its objects go with it).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import yaml

from tests.paths import REPO

DEPLOY = REPO / "deploy"


def objects(image: str = "", folder: Path = DEPLOY) -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    rewrites = {entry["name"]: entry for entry in kustomization.get("images", [])}
    out: list[dict[str, Any]] = []
    for resource in kustomization["resources"]:
        for document in yaml.safe_load_all((folder / resource).read_text()):
            if document:
                _set_images(document, rewrites, image)
                out.append(document)
    return out


def _set_images(document: dict[str, Any], rewrites: dict[str, Any], image: str) -> None:
    spec = document.get("spec", {}).get("template", {}).get("spec", {})
    for container in spec.get("initContainers", []) + spec.get("containers", []):
        name, _, tag = container["image"].partition(":")
        rewrite = rewrites.get(name)
        if rewrite is None:
            continue
        if image:
            container["image"] = image
        else:
            container["image"] = f"{rewrite.get('newName', name)}:{rewrite.get('newTag', tag)}"


def daemonset_image(items: list[dict[str, Any]]) -> str:
    for item in items:
        if item["kind"] == "DaemonSet":
            return str(item["spec"]["template"]["spec"]["containers"][0]["image"])
    raise LookupError("deploy/ has no DaemonSet")


def _resource(dynamic: Any, item: dict[str, Any]) -> Any:
    return dynamic.resources.get(api_version=item["apiVersion"], kind=item["kind"])


def apply(api_client: Any, items: list[dict[str, Any]]) -> None:
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import ConflictError

    dynamic = DynamicClient(api_client)
    for item in items:
        resource = _resource(dynamic, item)
        namespace = item["metadata"].get("namespace")
        try:
            resource.create(body=item, namespace=namespace)
        except ConflictError:
            current = resource.get(name=item["metadata"]["name"], namespace=namespace)
            item = {
                **item,
                "metadata": {
                    **item["metadata"],
                    "resourceVersion": current.metadata.resourceVersion,
                },
            }
            resource.replace(body=item, namespace=namespace)


def delete(api_client: Any, items: list[dict[str, Any]]) -> None:
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import NotFoundError

    dynamic = DynamicClient(api_client)
    for item in items:
        with contextlib.suppress(NotFoundError):
            _resource(dynamic, item).delete(
                name=item["metadata"]["name"], namespace=item["metadata"].get("namespace")
            )
