"""The DaemonSet runs real `meshwire` commands with flags they accept, on the config it mounts.

Each container's command is run here the way the node would run it: the
ConfigMap's file stands at its mount path, the downward-API variables have a
node's values, and hostPath volumes are temporary directories.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cni_helpers import build_c_shim
from deploy_helpers import config_text, container, mount_of, pod_spec, volume

from meshwire.control.auth.tls import NodeCredentials, check_wire_key
from meshwire.control.cni import install
from meshwire.control.common.config import Config, ConfigError, load_config
from meshwire.control.daemon.command import config_from_args, parse_args
from meshwire.tools.cli import COMMANDS

# What the kubelet puts in the downward-API variables on some node.
NODE_FIELDS = {
    "spec.nodeName": "worker-7",
    "status.hostIP": "10.240.0.7",
    "metadata.namespace": "meshwire",
}


def node_env(spec: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in spec.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            env[item["name"]] = NODE_FIELDS[item["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def on_node(spec: dict[str, Any], argv: list[str], roots: dict[str, Path]) -> list[str]:
    """`argv` with every absolute path moved onto the temp dir standing for its volume."""
    out = []
    for arg in argv:
        if arg.startswith("/"):
            mount, rest = mount_of(spec, arg)
            arg = str(roots[mount["name"]] / rest)
        out.append(arg)
    return out


def volume_roots(tmp_path: Path) -> dict[str, Path]:
    """A temp dir per volume; the ConfigMap's keys are written into its own."""
    roots = {}
    for item in pod_spec()["volumes"]:
        root = tmp_path / item["name"]
        root.mkdir()
        roots[item["name"]] = root
    (roots["config"] / "config.yaml").write_text(config_text())
    return roots


def configmap_config(tmp_path: Path) -> Config:
    path = tmp_path / "config.yaml"
    path.write_text(config_text())
    return load_config(path, env={"MESHWIRE_NODE_IP": NODE_FIELDS["status.hostIP"]})


def command_words(spec: dict[str, Any]) -> tuple[tuple[str, ...], list[str]]:
    argv = list(spec["command"]) + list(spec.get("args", []))
    assert argv[0] == "meshwire", argv
    for words in sorted(COMMANDS, key=len, reverse=True):
        if tuple(argv[1 : 1 + len(words)]) == words:
            return words, argv[1 + len(words) :]
    raise AssertionError(f"{argv}: not a meshwire command")


@pytest.mark.parametrize("name", ["install-cni", "meshwire"])
def test_each_container_runs_a_meshwire_command_that_answers_help(name: str) -> None:
    words, _ = command_words(container(name))
    result = subprocess.run(
        [sys.executable, "-m", "meshwire.tools.cli", *words, "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "usage: meshwire " + " ".join(words) in result.stdout


def test_the_daemon_accepts_its_flags_and_loads_the_configmap_with_the_node_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = container("meshwire")
    words, argv = command_words(spec)
    assert words == ("daemon",)
    for name in [n for n in os.environ if n.startswith("MESHWIRE_")]:
        monkeypatch.delenv(name)
    for name, value in node_env(spec).items():
        monkeypatch.setenv(name, value)

    config = config_from_args(parse_args(on_node(spec, argv, volume_roots(tmp_path))))

    assert config.node_name == "worker-7"
    assert config.node_ip == "10.240.0.7"
    assert (config.api.url, config.api.kubeconfig) == ("", "")  # in-cluster service account


def test_the_configmap_alone_lacks_only_node_ip(tmp_path: Path) -> None:
    assert configmap_config(tmp_path).node_ip == NODE_FIELDS["status.hostIP"]
    with pytest.raises(ConfigError, match="node_ip: required"):
        load_config(tmp_path / "config.yaml", env={})


def test_the_init_container_installs_the_shim_and_chains_it_with_the_configs_socket(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build_c_shim()
    spec = container("install-cni")
    words, argv = command_words(spec)
    assert words == ("cni", "install")
    roots = volume_roots(tmp_path)
    primary = {"cniVersion": "0.3.1", "name": "kindnet", "plugins": [{"type": "ptp"}]}
    (roots["cni-conf"] / "10-kindnet.conflist").write_text(json.dumps(primary))

    assert install.main(on_node(spec, argv, roots)) == 0, capsys.readouterr().err

    assert os.access(roots["cni-bin"] / "meshnet", os.X_OK)
    chained = json.loads((roots["cni-conf"] / "10-kindnet.conflist").read_text())
    socket = yaml.safe_load(config_text())["cni"]["socket"]
    assert chained["plugins"][-1] == install.plugin_entry(socket)


def test_the_install_writes_to_the_nodes_cni_directories() -> None:
    spec = container("install-cni")
    _, argv = command_words(spec)
    for flag, host_dir in (("--bin-dir", "/opt/cni/bin"), ("--conf-dir", "/etc/cni/net.d")):
        mount, rest = mount_of(spec, argv[argv.index(flag) + 1])
        assert rest == ""
        assert volume(mount["name"])["hostPath"]["path"] == host_dir


def test_the_cni_socket_is_on_the_host_at_the_same_path_the_shim_is_told(tmp_path: Path) -> None:
    socket = configmap_config(tmp_path).cni.socket
    mount, rest = mount_of(container("meshwire"), os.path.dirname(socket))
    host = volume(mount["name"])["hostPath"]["path"]
    assert os.path.join(host, rest).rstrip("/") == mount["mountPath"].rstrip("/")


def test_sandbox_records_outlive_the_daemons_pod_but_not_the_nodes_reboot(
    tmp_path: Path,
) -> None:
    # On the host, so a restarted daemon pod finds them; under /run (tmpfs), so a
    # reboot forgets them together with the sandboxes they name.
    state_dir = configmap_config(tmp_path).cni.state_dir
    mount, rest = mount_of(container("meshwire"), state_dir)
    host = os.path.join(volume(mount["name"])["hostPath"]["path"], rest)
    assert host.startswith("/run/") and not mount.get("readOnly", False)


def test_the_daemon_gets_the_node_name_and_address_from_the_downward_api() -> None:
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container("meshwire")["env"]}
    assert env == {
        "MESHWIRE_NODE_NAME": "spec.nodeName",
        "MESHWIRE_NODE_IP": "status.hostIP",
        "MESHWIRE_CNI__DEPLOYMENT_NAMESPACE": "metadata.namespace",
    }


def test_probes_ask_the_metrics_port_for_healthz_and_readyz(tmp_path: Path) -> None:
    spec = container("meshwire")
    metrics_port = int(configmap_config(tmp_path).metrics.listen.rpartition(":")[2])
    ports = {p["name"]: p["containerPort"] for p in spec["ports"]}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = spec[probe]["httpGet"]
        assert get["path"] == path
        assert ports.get(get["port"], get["port"]) == metrics_port


def test_the_pod_runs_in_the_hosts_network_and_pid_namespaces_privileged() -> None:
    spec = pod_spec()
    assert spec["hostNetwork"] is True
    assert spec["hostPID"] is True  # netns paths given as /proc/<pid>/ns/net resolve
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["enableServiceLinks"] is False  # no MESHWIRE_*_SERVICE_* variables
    assert container("meshwire")["securityContext"]["privileged"] is True


def test_netns_mounts_propagate_both_ways_from_the_host() -> None:
    mount, rest = mount_of(container("meshwire"), "/var/run/netns")
    assert rest == ""
    assert mount["mountPropagation"] == "Bidirectional"
    assert volume(mount["name"])["hostPath"]["path"] == "/var/run/netns"


def test_both_containers_run_the_same_image() -> None:
    assert container("install-cni")["image"] == container("meshwire")["image"]


def test_the_daemon_reads_its_credentials_from_the_secret_certs_init_makes(
    tmp_path: Path,
) -> None:
    """`meshwire certs init DIR` writes the Secret; the DaemonSet mounts it where the
    ConfigMap's auth keys point, and the daemon loads the credentials from there."""
    auth = configmap_config(tmp_path).auth
    assert auth.enabled
    out = subprocess.run(
        [sys.executable, "-m", "meshwire.tools.cli", "certs", "init", str(tmp_path / "c")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "kubectl apply -f" in out.stderr
    secret = yaml.safe_load((tmp_path / "c" / "secret.yaml").read_text())
    assert (secret["kind"], secret["metadata"]["namespace"]) == ("Secret", "meshwire")
    roots = volume_roots(tmp_path)
    for path in (auth.ca_cert, auth.ca_key, auth.wire_key):
        mount, rest = mount_of(container("meshwire"), path)
        assert mount.get("readOnly") is True
        assert volume(mount["name"])["secret"]["secretName"] == secret["metadata"]["name"]
        # The kubelet writes each key of the Secret as a file named by the key.
        (roots[mount["name"]] / rest).write_bytes(base64.b64decode(secret["data"][rest]))
    on = {key: on_node(container("meshwire"), [path], roots)[0] for key, path in (
        ("ca_cert", auth.ca_cert), ("ca_key", auth.ca_key), ("wire_key", auth.wire_key)
    )}  # fmt: skip
    credentials = NodeCredentials(auth.model_copy(update=on), "worker-7", "10.240.0.7")
    check_wire_key(auth.model_copy(update=on))
    assert b"BEGIN CERTIFICATE" in credentials.issued.chain


def test_the_workers_outlive_the_daemons_container_on_the_host(tmp_path: Path) -> None:
    # The next daemon finds them in a run directory on the host, and they sit in a
    # cgroup of the host's, not the container's (which the runtime kills whole).
    dataplane = configmap_config(tmp_path).dataplane
    mount, rest = mount_of(container("meshwire"), dataplane.run_dir)
    host = os.path.join(volume(mount["name"])["hostPath"]["path"], rest)
    assert host.startswith("/run/") and not mount.get("readOnly", False)
    assert dataplane.worker_cgroup
    mount, rest = mount_of(container("meshwire"), dataplane.cgroup_root)
    assert rest == "" and not mount.get("readOnly", False)
    assert volume(mount["name"])["hostPath"]["path"] == "/sys/fs/cgroup"
