"""deploy/ on a real node: the image of `make image`, the DaemonSet, pods wired by containerd.

One real node (tests/kube_node.py: kubelet + containerd + runc, kube-controller-manager and
kube-scheduler beside a private kube-apiserver) runs the whole module; the tests run in
order on it, as a user would go: apply deploy/ as it is (its image built by
scripts/image.sh and imported into the node's containerd), create the pods of meshnet's
3node.yml (busybox), ping every link, then restart and replace everything around them.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from tests import deploy_objects
from tests.kube_cluster import ControlPlane
from tests.kube_helpers import create_namespace_for_pods, wait_for
from tests.kube_node import BUSYBOX_IMAGE, Node, node_binaries, running_node
from tests.paths import MESHNET
from tests.ping_loop import PingLoop

# The first test also waits for the module's node, and for the image when pytest runs
# without `make test` on a cold cache (the build takes minutes).
pytestmark = [pytest.mark.realnode, pytest.mark.timeout(900)]

LAB_NS = "lab"
DAEMON_NS = "meshwire"
DAEMON_LABEL = "app.kubernetes.io/name=meshwire"
TOPOLOGY = ("networkop.co.uk", "v1beta1", "topologies")
WAIT = 120.0
# What a probe may raise while the thing it waits for is on its way: the API's
# errors (an object not there yet, a connection cut) and a pod's process not there.
IGNORED = (ApiException, HTTPError, OSError, LookupError)


# -- the module's node and lab ----------------------------------------------------------


@pytest.fixture(scope="module")
def node(kube_assets: Path, meshwire_image: Path) -> Iterator[Node]:
    plane = ControlPlane(kube_assets)
    plane.start()
    try:
        with running_node(plane, node_binaries(kube_assets)) as running:
            running.import_image(meshwire_image)
            yield running
    finally:
        plane.stop()


class Lab:
    """3node.yml's Topologies and pods in namespace `lab`, on `node`."""

    def __init__(self, node: Node) -> None:
        from kubernetes import client

        self.node = node
        self.api_client = node.admin
        self.core = client.CoreV1Api(self.api_client)
        self.apps = client.AppsV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        items = yaml.safe_load((MESHNET / "3node.yml").read_text())["items"]
        self.topologies = {i["metadata"]["name"]: i for i in items if i["kind"] == "Topology"}
        self.pods = {i["metadata"]["name"]: i for i in items if i["kind"] == "Pod"}
        self.deploy = deploy_objects.objects()

    # -- objects -----------------------------------------------------------------

    def create_topologies(self) -> None:
        create_namespace_for_pods(self.api_client, LAB_NS, WAIT)
        for body in self.topologies.values():
            self.custom.create_namespaced_custom_object(*TOPOLOGY[:2], LAB_NS, TOPOLOGY[2], body)

    def create_pod(self, name: str) -> None:
        body = yaml.safe_load(yaml.safe_dump(self.pods[name]))
        body["spec"]["terminationGracePeriodSeconds"] = 1
        for container in body["spec"]["containers"]:
            container["image"] = BUSYBOX_IMAGE
            container["imagePullPolicy"] = "Never"
            container["command"] = ["sleep", "2000000000"]
        self.core.create_namespaced_pod(LAB_NS, body)

    def delete_pod(self, name: str, namespace: str = LAB_NS) -> None:
        uid = self.core.read_namespaced_pod(name, namespace).metadata.uid
        self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=1)

        def gone() -> bool:
            try:
                return self.core.read_namespaced_pod(name, namespace).metadata.uid != uid
            except Exception as exc:
                return getattr(exc, "status", None) == 404

        wait_for(f"pod {namespace}/{name} deleted", gone, WAIT, IGNORED)

    def running(self, name: str) -> Any:
        pod = self.core.read_namespaced_pod(name, LAB_NS)
        return pod if pod.status.phase == "Running" else None

    def wait_running(self, *names: str) -> None:
        for name in names or tuple(self.pods):
            wait_for(f"pod {name} Running", lambda n=name: self.running(n), WAIT, IGNORED)

    def daemon_pods(self) -> list[Any]:
        return list(self.core.list_namespaced_pod(DAEMON_NS, label_selector=DAEMON_LABEL).items)

    def daemon_ready(self) -> Any:
        pods = [p for p in self.daemon_pods() if p.metadata.deletion_timestamp is None]
        if len(pods) != 1:
            return None
        conditions = {c.type: c.status for c in pods[0].status.conditions or []}
        return pods[0] if conditions.get("Ready") == "True" else None

    def daemon_diagnostics(self) -> str:
        """The meshwire pods' phases, container states and logs' tails, for a failure."""
        out = []
        for pod in self.daemon_pods():
            out.append(f"pod {pod.metadata.name}: {pod.status.phase} {pod.status.conditions}")
            for status in pod.status.container_statuses or []:
                out.append(f"  {status.name}: {status.state}")
            out.append(self.node.container_log(DAEMON_NS, pod, "meshwire"))
        return "\n".join(out) or "no meshwire pod"

    # -- the pods' network --------------------------------------------------------------

    def netns(self, name: str) -> str:
        uid = self.core.read_namespaced_pod(name, LAB_NS).metadata.uid
        return f"/proc/{self.node.pod_pid(uid)}/ns/net"

    def links(self) -> Iterator[tuple[str, str, str]]:
        """(pod, its interface, the peer's address) for every link end."""
        for name, topology in self.topologies.items():
            for link in topology["spec"]["links"]:
                yield name, link["local_intf"], link["peer_ip"].split("/")[0]

    def pings(self, pod: str, address: str) -> bool:
        done = subprocess.run(
            ["nsenter", f"--net={self.netns(pod)}", "ping", "-c", "2", "-i", "0.2", "-W", "2",
             address],
            capture_output=True,
        )  # fmt: skip
        return done.returncode == 0

    def wait_all_ping(self) -> None:
        for pod, intf, address in self.links():
            wait_for(
                f"{pod}:{intf} pings {address}",
                lambda p=pod, a=address: self.pings(p, a),
                WAIT,
                IGNORED,
            )

    def ifindexes(self) -> dict[tuple[str, str], int]:
        """Each link end's ifindex (netlink's: /sys shows the host's netns, not the pod's)."""
        out = {}
        for pod, intf, _ in self.links():
            text = subprocess.run(
                ["nsenter", f"--net={self.netns(pod)}", "ip", "-o", "link", "show", intf],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            out[(pod, intf)] = int(text.split(":", 1)[0])
        return out


@pytest.fixture(scope="module")
def lab(node: Node) -> Lab:
    lab = Lab(node)
    deploy_objects.apply(lab.api_client, lab.deploy)
    try:
        wait_for("the meshwire DaemonSet's pod Ready", lab.daemon_ready, 180, IGNORED)
    except TimeoutError as err:
        raise TimeoutError(f"{err}\n{lab.daemon_diagnostics()}") from None
    lab.create_topologies()
    for name in lab.pods:
        lab.create_pod(name)
    lab.wait_running()
    return lab


def assert_no_loss_while(lab: Lab, action: Callable[[], None]) -> None:
    before = lab.ifindexes()
    loops = [PingLoop(lab.netns("r1"), "12.12.12.2"), PingLoop(lab.netns("r2"), "23.23.23.3")]
    try:
        time.sleep(1)
        action()
        time.sleep(1)
    finally:
        for loop in loops:
            loop.stop()
    for loop in loops:
        assert len(loop.replies()) > 100, loop.output[-2000:]
        assert loop.lost() == [], f"lost {len(loop.lost())} pings: {loop.output[-2000:]}"
    assert lab.ifindexes() == before, "an interface was rebuilt"


# -- the tests, in the order a user goes ---------------------------------------------------


def test_every_link_of_3node_pings(lab: Lab) -> None:
    lab.wait_all_ping()


def test_the_init_container_chained_the_shim(lab: Lab) -> None:
    conflists = sorted(lab.node.root("/etc/cni/net.d").glob("*.conflist"))
    plugins = [p["type"] for p in yaml.safe_load(conflists[0].read_text())["plugins"]]
    assert plugins[-1] == "meshnet", plugins
    assert (lab.node.root("/opt/cni/bin") / "meshnet").exists()


def test_the_daemon_runs_on_its_service_account_in_cluster(lab: Lab) -> None:
    pod = lab.daemon_ready()
    assert pod.spec.host_network and pod.spec.service_account_name == "meshwire"
    config = yaml.safe_load(
        lab.core.read_namespaced_config_map("meshwire-config", DAEMON_NS).data["config.yaml"]
    )
    assert (config["api"]["url"], config["api"]["kubeconfig"]) == ("", "")
    mounts = [m.mount_path for m in pod.spec.containers[0].volume_mounts]
    assert "/var/run/secrets/kubernetes.io/serviceaccount" in mounts
    # The API server's audit log: the daemon watched Topologies and the Nodes as its
    # ServiceAccount, and was never refused.
    account = "system:serviceaccount:meshwire:meshwire"
    events = [json.loads(line) for line in lab.node.plane.audit_log.read_text().splitlines()]
    mine = [e for e in events if e["user"]["username"] == account]
    read = {e["objectRef"].get("resource") for e in mine if "objectRef" in e}
    assert {"topologies", "nodes"} <= read, read
    refused = [e["requestURI"] for e in mine if e.get("responseStatus", {}).get("code") == 403]
    assert refused == []


def test_a_pod_deleted_and_created_again_gets_its_links_back(lab: Lab) -> None:
    lab.delete_pod("r2")
    lab.create_pod("r2")
    lab.wait_running("r2")
    lab.wait_all_ping()


def test_the_meshwire_pod_replaced_loses_no_ping(lab: Lab) -> None:
    old = lab.daemon_ready()

    def replace() -> None:
        lab.delete_pod(old.metadata.name, DAEMON_NS)
        new = wait_for("a new meshwire pod Ready", lab.daemon_ready, 180, IGNORED)
        assert new.metadata.uid != old.metadata.uid

    assert_no_loss_while(lab, replace)


def test_a_rollout_to_a_new_tag_loses_no_ping(lab: Lab) -> None:
    current = deploy_objects.daemonset_image(lab.deploy)
    tag = f"{current.split(':')[0]}:rollout-{uuid.uuid4().hex[:6]}"
    lab.node.ctr("images", "tag", f"docker.io/library/{current}", f"docker.io/library/{tag}")
    old = lab.daemon_ready()

    def rollout() -> None:
        lab.apps.patch_namespaced_daemon_set(
            "meshwire",
            DAEMON_NS,
            {"spec": {"template": {"spec": {"containers": [{"name": "meshwire", "image": tag}]}}}},
        )

        def rolled() -> Any:
            pod = lab.daemon_ready()
            return pod if pod and pod.metadata.uid != old.metadata.uid else None

        new = wait_for("the rolled-out meshwire pod Ready", rolled, 180, IGNORED)
        assert new.spec.containers[0].image == tag

    assert_no_loss_while(lab, rollout)


def restarted_keeps_links_and_wires_new_pods(
    lab: Lab, restart: Callable[[], None], pod: str
) -> None:
    """`restart` keeps every link (same interfaces, pinging), and `pod` made again
    afterwards gets its links back."""
    before = lab.ifindexes()
    restart()
    lab.wait_all_ping()
    assert lab.ifindexes() == before
    lab.delete_pod(pod)
    lab.create_pod(pod)
    lab.wait_running(pod)
    lab.wait_all_ping()


def test_containerd_restarted_keeps_links_and_wires_new_pods(lab: Lab) -> None:
    restarted_keeps_links_and_wires_new_pods(lab, lab.node.restart_containerd, "r3")


def test_kubelet_restarted_keeps_links_and_wires_new_pods(lab: Lab) -> None:
    restarted_keeps_links_and_wires_new_pods(lab, lab.node.restart_kubelet, "r1")


def test_deleting_deploy_leaves_the_links_and_takes_the_shim_out(lab: Lab) -> None:
    before = lab.ifindexes()
    deploy_objects.delete(lab.api_client, lab.deploy)
    wait_for("the meshwire pods gone", lambda: not lab.daemon_pods(), 180, IGNORED)

    conflist = sorted(lab.node.root("/etc/cni/net.d").glob("*.conflist"))[0]
    plugins = [p["type"] for p in yaml.safe_load(conflist.read_text())["plugins"]]
    assert "meshnet" not in plugins, plugins
    lab.wait_all_ping()
    assert lab.ifindexes() == before
    # A pod made now is not handed to meshwire, and runs.
    lab.pods["plain"] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain"},
        "spec": {"containers": [{"name": "pod", "image": BUSYBOX_IMAGE}]},
    }
    lab.create_pod("plain")
    lab.wait_running("plain")
