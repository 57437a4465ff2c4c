"""deploy/'s objects as `kubectl apply -k deploy/` sends them, through the official client.

`objects()` is deploy/'s manifests (deploy_helpers: the kustomization's `resources`
in order) with the kustomization's `images` rewrite applied as kustomize does (a
container whose image is `name[:tag]` gets `newName` and `newTag`). `apply` creates or
replaces them in that order; `delete` removes them in that order too, as
`kubectl delete -k` does (the namespace first: its objects go with it).
"""

from __future__ import annotations

import contextlib
from typing import Any

from tests.deploy_helpers import kustomization, manifests


def objects() -> list[dict[str, Any]]:
    rewrites = {entry["name"]: entry for entry in kustomization().get("images", [])}
    out = manifests()
    for document in out:
        _set_images(document, rewrites)
    return out


def _set_images(document: dict[str, Any], rewrites: dict[str, Any]) -> None:
    spec = document.get("spec", {}).get("template", {}).get("spec", {})
    for container in spec.get("initContainers", []) + spec.get("containers", []):
        name, _, tag = container["image"].partition(":")
        rewrite = rewrites.get(name)
        if rewrite is not None:
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
