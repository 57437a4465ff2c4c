"""A node's daemon: its config file (the user's base config plus what the lab decides) and start.

The lab sets, per node: `node_name`, `node_ip` (its underlay address),
`api.url` (the API through the hub relay), `cni.socket`, `cni.state_dir` and
`dataplane.run_dir` (in the node's lab directory: the workers outlive a killed
daemon and are adopted by the next, and `lab down` stops them there),
`peer.listen` and `metrics.listen` (on the node's address, keeping the base
config's ports), `api.token_file` and `metrics.token_file` (the lab's token: the
daemon presents it to the lab's API, and asks it of a client of `/links` and
`/placement` off its loopback), and `cni.add_timeout` 300 s unless the base config
sets it. `workers` defaults to 1 unless the base config sets
it: N simulated nodes on one machine must not start N x cores processes.
`auth.ca_cert`, `auth.ca_key` and `auth.wire_key` point at the lab's own
credentials (`<lab directory>/auth`, made by `lab up`) unless the base config
sets them: each node's daemon issues its own certificate from the lab's CA.
Everything else comes from the base config unchanged.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from meshwire.control.common.config import Config, ConfigError, load_config
from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.state import WORKER_DIR

DEFAULT_PEER_PORT = 51111
DEFAULT_METRICS_PORT = 51100
# cni.add_timeout of a lab node unless the base config sets it: a pod of meshnet's
# 1,500-link fixture takes longer than the daemon's 30 s default to wire on 2 cores,
# and where a runtime would retry the ADD, the lab waits for it instead.
LAB_ADD_TIMEOUT = 300.0


def read_base(path: Path | None) -> dict[str, Any]:
    """The user's base config as a mapping; raises LabError naming the file."""
    if path is None:
        return {}
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise LabError(f"config file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise LabError(f"config file {path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise LabError(f"config file {path}: expected a mapping of keys")
    return data


def _port(base: dict[str, Any], section: str, default: int) -> int:
    listen = (base.get(section) or {}).get("listen")
    if isinstance(listen, str) and listen.rpartition(":")[2].isdigit():
        return int(listen.rpartition(":")[2])
    return default


def node_config(
    base: dict[str, Any],
    node: str,
    ip: str,
    api_url: str,
    node_dir: Path,
    auth_dir: Path,
    token_file: Path,
) -> dict[str, Any]:
    """The config of one node: a pure function of the base config and the node's place.
    `auth_dir` holds the lab's credentials (`meshwire certs init`), which every node uses
    unless the base config names its own; `token_file` the lab's API token."""
    config = copy.deepcopy(base)
    auth = config.setdefault("auth", {})
    auth.setdefault("ca_cert", str(auth_dir / "ca.crt"))
    auth.setdefault("ca_key", str(auth_dir / "ca.key"))
    auth.setdefault("wire_key", str(auth_dir / "wire.key"))
    config["node_name"] = node
    config["node_ip"] = ip
    config.setdefault("workers", 1)
    config.setdefault("api", {})["url"] = api_url
    config["api"]["token_file"] = str(token_file)
    config.setdefault("cni", {})["socket"] = str(node_dir / "cni.sock")
    config["cni"]["state_dir"] = str(node_dir / "sandboxes")
    config.setdefault("dataplane", {})["run_dir"] = str(node_dir / WORKER_DIR)
    config["cni"].setdefault("add_timeout", LAB_ADD_TIMEOUT)
    config.setdefault("peer", {})["listen"] = f"{ip}:{_port(base, 'peer', DEFAULT_PEER_PORT)}"
    metrics = _port(base, "metrics", DEFAULT_METRICS_PORT)
    config.setdefault("metrics", {})["listen"] = f"{ip}:{metrics}"
    config["metrics"]["token_file"] = str(token_file)
    return config


def write_config(config: dict[str, Any], path: Path) -> Config:
    """Write the node config and return it validated, so a bad base key fails `up`
    before any daemon runs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    try:
        return load_config(path, env={})
    except ConfigError as exc:
        raise LabError(f"node {config['node_name']}: {exc}") from None
