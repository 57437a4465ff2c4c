"""A kubeconfig as a cluster admin hands one out: a cluster, a token user, a context."""

from __future__ import annotations

from pathlib import Path

import yaml


def write_kubeconfig(
    path: Path, server: str, *, token: str = "node-token", proxy_url: str = ""
) -> Path:
    """Write it to `path` for `server` (through `proxy_url`, the cluster's `proxy-url`)."""
    cluster: dict[str, str] = {"server": server}
    if proxy_url:
        cluster["proxy-url"] = proxy_url
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": cluster}],
        "users": [{"name": "node", "user": {"token": token}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "node"}}],
    }
    path.write_text(yaml.safe_dump(config))
    return path
