"""deploy/ on three real nodes: cross-node links made through a real runtime's CNI calls,
and the failures a cluster has.

One cluster runs the whole module (tests/kube_nodes.py): three kubelets, each with its own
containerd, network and mount namespaces and cgroup root, joined by an underlay bridge
that carries vxlan, the gRPC wire and the peer RPCs between the node addresses, beside
one control plane. The tests run in order on it, as a cluster's life goes: deploy/ applied
as it is (a meshwire pod Ready on each node, the idle cluster's cost reported); meshnet's
3node.yml spread one pod per node by the scheduler (an anti-affinity in the pods' specs),
every link pinging over vxlan; a pod moved to its peer's node and back, its links changing
transport with it; a node's kubelet and containerd stopped for a minute, a node cut from
the underlay, the API server restarted, a node removed from the cluster (its
peers' ends lose carrier) and back; the ConfigMap switched to grpc and rolled out
(the new daemons adopt the workers the old ones left in the removed pods) under 10 ms
ping loops; then a rollout across the nodes, every cross-node link on the workers, under
10 ms ping loops; a KNE-sized lab of 60 pods; and the ConfigMap switched back to vxlan
and rolled out. The pings lost per link are reported.
"""

from __future__ import annotations

import collections
import json
import re
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from meshwire.base.netns_thread import call_in_netns
from meshwire.control.daemon.node_watch import LINK_TYPE
from tests import deploy_objects
from tests.kne_lab import ring_lab, ring_links
from tests.kube_helpers import create_namespace_for_pods, wait_for
from tests.kube_node import BUSYBOX_IMAGE, Node, node_binaries
from tests.kube_nodes import Cluster, running_cluster
from tests.paths import MESHNET
from tests.ping_loop import PingLoop

pytestmark = [pytest.mark.root, pytest.mark.realnode]

LAB_NS = "lab"
DAEMON_NS = "meshwire"
DAEMON_LABEL = "app.kubernetes.io/name=meshwire"
TOPOLOGY = ("networkop.co.uk", "v1beta1", "topologies")
HOSTNAME = "kubernetes.io/hostname"
# 3node.yml's pods carry it; the spread anti-affinity keeps two of them off one node.
SPREAD_LABEL = ("test", "3node")
POD_LABEL = "meshwire.test/pod"
METRICS = "http://127.0.0.1:51100"
WAIT = 180.0
# What a probe may raise while the thing it waits for is on its way: the API's errors
# (an object not there yet, a connection cut), a pod's process or a daemon not there.
IGNORED = (ApiException, HTTPError, OSError, LookupError, subprocess.CalledProcessError)


def spread() -> dict[str, Any]:
    """No two pods of 3node.yml on one node."""
    key, value = SPREAD_LABEL
    term = {"labelSelector": {"matchLabels": {key: value}}, "topologyKey": HOSTNAME}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def beside(pod: str) -> dict[str, Any]:
    """On the node of `pod`."""
    term = {"labelSelector": {"matchLabels": {POD_LABEL: pod}}, "topologyKey": HOSTNAME}
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


class Lab:
    """deploy/ and 3node.yml's Topologies and pods (namespace `lab`) on `cluster`."""

    def __init__(self, cluster: Cluster) -> None:
        from kubernetes import client

        self.cluster = cluster
        self.api_client = cluster.nodes[0].admin
        self.core = client.CoreV1Api(self.api_client)
        self.apps = client.AppsV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        items = yaml.safe_load((MESHNET / "3node.yml").read_text())["items"]
        self.topologies = {i["metadata"]["name"]: i for i in items if i["kind"] == "Topology"}
        self.pods = {i["metadata"]["name"]: i for i in items if i["kind"] == "Pod"}
        self.deploy = deploy_objects.objects()
        # What carries a link across nodes: deploy/configmap.yaml's, until a test changes it.
        self.transport = "vxlan"

    # -- the DaemonSet --------------------------------------------------------------------

    def apply_deploy(self, auth_dir: Path) -> None:
        """deploy/ as it is, and the cluster's credentials as docs/deploying.md makes them."""
        subprocess.run(
            [sys.executable, "-m", "meshwire.tools.cli", "certs", "init", str(auth_dir)],
            check=True,
            capture_output=True,
        )
        secret = yaml.safe_load((auth_dir / "secret.yaml").read_text())
        namespace = [d for d in self.deploy if d["kind"] == "Namespace"]
        deploy_objects.apply(self.api_client, namespace)
        deploy_objects.apply(self.api_client, [secret, *self.deploy])

    def daemons(self) -> dict[str, Any] | None:
        """Node name -> its meshwire pod, once each node has exactly one, Ready."""
        pods = self.core.list_namespaced_pod(DAEMON_NS, label_selector=DAEMON_LABEL).items
        live = [p for p in pods if p.metadata.deletion_timestamp is None]
        ready = {
            p.spec.node_name: p
            for p in live
            if {c.type: c.status for c in p.status.conditions or []}.get("Ready") == "True"
        }
        names = {node.name for node in self.cluster.nodes}
        return ready if len(live) == len(names) and set(ready) == names else None

    def wait_daemons(self, replacing: Collection[str] = ()) -> dict[str, Any]:
        """Each node's meshwire pod Ready, none of them one of the pods `replacing` (uids)."""

        def done() -> dict[str, Any] | None:
            pods = self.daemons()
            if pods is None or any(p.metadata.uid in replacing for p in pods.values()):
                return None
            return pods

        try:
            return wait_for("a meshwire pod Ready on each node", done, WAIT, IGNORED)
        except TimeoutError as err:
            raise TimeoutError(f"{err}\n{self.daemon_diagnostics()}") from None

    def daemon_diagnostics(self) -> str:
        out = []
        for pod in self.core.list_namespaced_pod(DAEMON_NS, label_selector=DAEMON_LABEL).items:
            out.append(f"pod {pod.metadata.name} on {pod.spec.node_name}: {pod.status.phase}")
            for status in pod.status.container_statuses or []:
                out.append(f"  {status.name}: {status.state}")
            if pod.spec.node_name:
                node = self.cluster.node(pod.spec.node_name)
                out.append(node.container_log(DAEMON_NS, pod, "meshwire"))
        return "\n".join(out) or "no meshwire pod"

    def roll_out(self, patch: dict[str, Any]) -> dict[str, Any]:
        """Patch the DaemonSet's pod template and wait until every node runs a new pod."""
        old = {p.metadata.uid for p in self.wait_daemons().values()}
        self.apps.patch_namespaced_daemon_set("meshwire", DAEMON_NS, patch)
        return self.wait_daemons(replacing=old)

    def links_report(self, node: Node) -> list[dict[str, Any]]:
        """The node's daemon's `/links` (its metrics port, from the node's loopback)."""

        def read() -> list[dict[str, Any]]:
            with urllib.request.urlopen(f"{METRICS}/links", timeout=10) as reply:
                return list(json.loads(reply.read()))

        return call_in_netns(node.netns, read)

    # -- the lab's objects ------------------------------------------------------------------

    def create_topologies(self) -> None:
        create_namespace_for_pods(self.api_client, LAB_NS, WAIT)
        for body in self.topologies.values():
            self.custom.create_namespaced_custom_object(*TOPOLOGY[:2], LAB_NS, TOPOLOGY[2], body)

    def create_pod(self, name: str, affinity: dict[str, Any], *, spread: bool = True) -> None:
        """3node.yml's pod `name` on busybox, placed by the scheduler through `affinity`;
        without `spread` it lacks the label the others' anti-affinity keeps apart."""
        body = yaml.safe_load(yaml.safe_dump(self.pods[name]))
        labels = body["metadata"].setdefault("labels", {})
        labels[POD_LABEL] = name
        if not spread:
            labels.pop(SPREAD_LABEL[0])
        body["spec"]["affinity"] = affinity
        body["spec"]["terminationGracePeriodSeconds"] = 1
        for container in body["spec"]["containers"]:
            container["image"] = BUSYBOX_IMAGE
            container["imagePullPolicy"] = "Never"
            container["command"] = ["sleep", "2000000000"]
        self.core.create_namespaced_pod(LAB_NS, body)

    def delete_pod(self, name: str) -> None:
        uid = self.core.read_namespaced_pod(name, LAB_NS).metadata.uid
        self.core.delete_namespaced_pod(name, LAB_NS, grace_period_seconds=1)

        def gone() -> bool:
            try:
                return self.core.read_namespaced_pod(name, LAB_NS).metadata.uid != uid
            except ApiException as exc:
                return exc.status == 404

        wait_for(f"pod {LAB_NS}/{name} deleted", gone, WAIT, IGNORED)

    def running(self, name: str) -> Any:
        pod = self.core.read_namespaced_pod(name, LAB_NS)
        return pod if pod.status.phase == "Running" else None

    def wait_running(self, *names: str) -> None:
        for name in names or tuple(self.pods):
            wait_for(f"pod {name} Running", lambda n=name: self.running(n), WAIT, IGNORED)

    def placement(self) -> dict[str, str]:
        """Pod -> the node it runs on."""
        return {
            name: self.core.read_namespaced_pod(name, LAB_NS).spec.node_name for name in self.pods
        }

    # -- the pods' network ---------------------------------------------------------------------

    def container_pid(self, name: str, namespace: str = LAB_NS) -> int:
        """A process of the pod's busybox container (not its pause container)."""
        pod = self.core.read_namespaced_pod(name, namespace)
        node = self.cluster.node(pod.spec.node_name)
        base = Path("/sys/fs/cgroup/pids") / node.cgroup_root.lstrip("/")
        for procs in sorted(base.glob(f"kubepods/**/pod{pod.metadata.uid}/*/cgroup.procs")):
            for pid in procs.read_text().split():
                if Path(f"/proc/{pid}/root/bin/busybox").exists():
                    return int(pid)
        raise LookupError(f"no busybox process of pod {name} on {node.name}")

    def netns(self, name: str) -> str:
        return f"/proc/{self.container_pid(name)}/ns/net"

    def links(self) -> Iterator[tuple[str, str, str, str]]:
        """(pod, its interface, the peer pod, the peer's address) for every link end."""
        for name, topology in self.topologies.items():
            for link in topology["spec"]["links"]:
                yield name, link["local_intf"], link["peer_pod"], link["peer_ip"].split("/")[0]

    def cross_node_links(self) -> list[tuple[str, str]]:
        """(pod, peer address) once per link whose two pods run on two nodes."""
        where = self.placement()
        return [
            (pod, address)
            for pod, _, peer, address in self.links()
            if pod < peer and where[pod] != where[peer]
        ]

    def pings(self, pod: str, address: str, namespace: str = LAB_NS) -> bool:
        """Whether busybox's ping, run inside the pod (its network and files), gets a reply."""
        done = subprocess.run(
            ["nsenter", "-t", str(self.container_pid(pod, namespace)), "--net", "--mount", "--",
             "ping", "-c", "2", "-W", "2", address],
            capture_output=True,
        )  # fmt: skip
        return done.returncode == 0

    def wait_all_ping(self) -> None:
        for pod, intf, _, address in self.links():
            wait_for(
                f"{pod}:{intf} pings {address}",
                lambda p=pod, a=address: self.pings(p, a),
                WAIT,
                IGNORED,
            )

    def ifindexes(self) -> dict[tuple[str, str], int]:
        """Each link end's ifindex in its pod (netlink's)."""
        out = {}
        for pod, intf, _, _ in self.links():
            text = subprocess.run(
                ["nsenter", f"--net={self.netns(pod)}", "ip", "-o", "link", "show", intf],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            out[(pod, intf)] = int(text.split(":", 1)[0])
        return out

    def kinds(self) -> dict[tuple[str, str], str]:
        """(pod, interface) -> the kind of the row that carries it, from each node's `/links`
        (a same-node veth row stands for both its ends)."""
        out = {}
        for node in self.cluster.nodes:
            for entry in self.links_report(node):
                if entry["state"] != "done":
                    continue
                ends = [entry["local"]]
                if entry["kind"] == "veth":
                    ends.append(entry["peer"])
                for end in ends:
                    out[(end["pod"].split("/", 1)[1], end["intf"])] = entry["kind"]
        return out

    def expected_kinds(self, transport: str) -> dict[tuple[str, str], str]:
        where = self.placement()
        return {
            (pod, intf): "veth" if where[pod] == where[peer] else transport
            for pod, intf, peer, _ in self.links()
        }

    def wait_kinds(self, transport: str) -> None:
        """Every link end done, carried by a veth on one node and `transport` across two."""
        want = self.expected_kinds(transport)
        wait_for(
            f"every link end done, across nodes over {transport}",
            lambda: self.kinds() == want,
            WAIT,
            IGNORED,
        )


# -- the module's cluster -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(kube_assets: Path, meshwire_image: Path) -> Iterator[Cluster]:
    with running_cluster(node_binaries(kube_assets), size=3) as running:
        running.import_image(meshwire_image)
        yield running


@pytest.fixture(scope="module")
def lab(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Lab:
    lab = Lab(cluster)
    lab.apply_deploy(tmp_path_factory.mktemp("meshwire-auth") / "auth")
    lab.wait_daemons()
    return lab


def loops_on_cross_node_links(lab: Lab) -> list[PingLoop]:
    return [PingLoop(lab.netns(pod), address) for pod, address in lab.cross_node_links()]


def stop_and_report(loops: list[PingLoop], record_property: Any, what: str) -> dict[str, int]:
    """Stop the loops; record and print the pings each lost (reported, not asserted)."""
    for loop in loops:
        loop.stop()
    lost = {loop.address: len(loop.lost()) for loop in loops}
    record_property(f"{what}_lost_pings", json.dumps(lost))
    print(f"{what}: pings lost per link (10 ms loops): {lost}")
    for loop in loops:
        assert len(loop.replies()) > 100, loop.output[-2000:]
    return lost


# -- the tests, in the order a cluster's life goes ------------------------------------------------


@pytest.mark.timeout(900)  # the cluster's start, and the image's build on a cold cache
def test_each_node_runs_a_ready_meshwire_pod(lab: Lab, record_property: Any) -> None:
    pods = lab.wait_daemons()
    assert sorted(pods) == sorted(node.name for node in lab.cluster.nodes)
    for name, pod in pods.items():
        assert pod.status.host_ip == lab.cluster.node(name).ip
    usage = lab.cluster.usage(seconds=10)
    record_property("idle_cluster", json.dumps(usage.__dict__))
    print(f"idle cluster of {len(pods)} nodes: {usage}")
    assert usage.processes > 0


@pytest.mark.timeout(300)
def test_3node_spread_one_pod_per_node_pings_over_vxlan(lab: Lab) -> None:
    lab.create_topologies()
    for name in lab.pods:
        lab.create_pod(name, spread())
    lab.wait_running()
    assert sorted(set(lab.placement().values())) == sorted(n.name for n in lab.cluster.nodes)
    lab.wait_kinds("vxlan")
    lab.wait_all_ping()


@pytest.mark.timeout(400)
def test_a_pod_moved_to_its_peers_node_and_back_gets_its_links_back(lab: Lab) -> None:
    home = lab.placement()
    lab.delete_pod("r1")
    lab.create_pod("r1", beside("r2"), spread=False)
    lab.wait_running("r1")
    assert lab.placement()["r1"] == home["r2"]
    lab.wait_kinds(lab.transport)
    assert lab.kinds()[("r1", "eth1")] == "veth"  # r1 - r2, now on one node
    lab.wait_all_ping()

    lab.delete_pod("r1")
    lab.create_pod("r1", spread())
    lab.wait_running("r1")
    assert lab.placement() == home
    lab.wait_kinds(lab.transport)
    lab.wait_all_ping()


@pytest.mark.timeout(400)
def test_a_nodes_kubelet_and_containerd_stopped_for_a_minute(
    lab: Lab, record_property: Any
) -> None:
    where = lab.placement()
    node = lab.cluster.node(where["r3"])
    # r1 - r2 does not touch r3's node: its two ends must never change.
    before = lab.ifindexes()
    untouched = PingLoop(lab.netns("r1"), "12.12.12.2")
    loops = [PingLoop(lab.netns("r1"), "13.13.13.3"), PingLoop(lab.netns("r2"), "23.23.23.3")]
    try:
        node.stop_runtime()
        time.sleep(60)
        assert lab.ifindexes() == before
        node.start_runtime()
        lab.wait_daemons()
        lab.wait_all_ping()
    finally:
        untouched.stop()
        stop_and_report(loops, record_property, "runtime_stopped")
    assert len(untouched.replies()) > 100, untouched.output[-2000:]
    assert untouched.lost() == [], f"r1 - r2 lost pings: {untouched.output[-2000:]}"
    assert lab.ifindexes() == before, "a link end was rebuilt"


@pytest.mark.timeout(300)
def test_a_node_cut_from_the_underlay_for_10s(lab: Lab, record_property: Any) -> None:
    underlay = lab.cluster.underlay
    assert underlay is not None
    node = lab.cluster.node(lab.placement()["r2"])
    before = lab.ifindexes()
    loops = loops_on_cross_node_links(lab)
    try:
        underlay.cut(node.name)
        time.sleep(10)
        underlay.reconnect(node.name)
        lab.wait_all_ping()
        time.sleep(2)
    finally:
        underlay.reconnect(node.name)
        stop_and_report(loops, record_property, "underlay_cut")
    for loop in loops:
        resumed = max(loop.replies(), default=0) > max(loop.lost(), default=0)
        assert resumed, f"no reply from {loop.address} after the cut: {loop.output[-2000:]}"
    assert lab.ifindexes() == before, "a link end was rebuilt"


@pytest.mark.timeout(400)
def test_the_api_server_restarted_while_all_nodes_run(lab: Lab) -> None:
    before = lab.ifindexes()
    plane = lab.cluster.plane
    plane.kill_apiserver()
    time.sleep(5)
    plane.start_apiserver()
    lab.wait_daemons()
    lab.wait_all_ping()
    assert lab.ifindexes() == before
    # The daemons' watches resumed: a pod made now is wired.
    lab.delete_pod("r2")
    lab.create_pod("r2", spread())
    lab.wait_running("r2")
    lab.wait_kinds(lab.transport)
    lab.wait_all_ping()


def carrier(netns: str, intf: str) -> tuple[bool, bool]:
    """(admin up, carrier) of the interface, as `ip link` shows them in its netns."""
    text = subprocess.run(
        ["nsenter", f"--net={netns}", "ip", "-o", "link", "show", intf],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    flags = text.split("<", 1)[1].split(">", 1)[0].split(",")
    return "UP" in flags, "NO-CARRIER" not in flags


@pytest.mark.timeout(500)
def test_a_node_removed_from_the_cluster_its_peers_lose_carrier(
    lab: Lab, record_property: Any
) -> None:
    """r3's node is lost (cut from the underlay, its kubelet and containerd stopped), then
    removed as an admin does: `kubectl delete node`, its pods force-deleted. The ends on
    the other nodes that led to r3 stay, admin-up without carrier; r1 - r2 is untouched.
    The node comes back, r3 is made again on it, and every link pings."""
    underlay = lab.cluster.underlay
    assert underlay is not None
    lost = lab.cluster.node(lab.placement()["r3"])
    far_ends = [(pod, intf) for pod, intf, peer, _ in lab.links() if peer == "r3"]
    assert len(far_ends) == 2
    netns = {pod: lab.netns(pod) for pod, _ in far_ends}
    before = {k: v for k, v in lab.ifindexes().items() if k[0] != "r3"}
    untouched = PingLoop(lab.netns("r1"), "12.12.12.2")
    try:
        underlay.cut(lost.name)
        lost.stop_runtime()
        removed = time.monotonic()
        lab.core.delete_node(lost.name)
        on_node = f"spec.nodeName={lost.name}"
        for pod in lab.core.list_pod_for_all_namespaces(field_selector=on_node).items:
            lab.core.delete_namespaced_pod(
                pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
            )
        wait_for(
            "r3's peers' ends without carrier, admin-up",
            lambda: all(carrier(netns[pod], intf) == (True, False) for pod, intf in far_ends),
            WAIT,
            IGNORED,
        )
        seconds = time.monotonic() - removed
        record_property("node_removed_carrier_lost_s", f"{seconds:.2f}")
        print(f"node removed: its peers' ends lost carrier {seconds:.2f} s after the delete")
        kinds = lab.kinds()
        assert {kinds.get(end) for end in far_ends} == {"detached"}, kinds
        assert lab.pings("r1", "12.12.12.2")
    finally:
        untouched.stop()
        underlay.reconnect(lost.name)
        lost.start_runtime()  # kubelet registers the node again
    assert untouched.lost() == [], f"r1 - r2 lost pings: {untouched.output[-2000:]}"
    lab.wait_daemons()
    lab.create_pod("r3", spread())
    lab.wait_running("r3")
    assert lab.placement()["r3"] == lost.name
    lab.wait_kinds(lab.transport)
    lab.wait_all_ping()
    assert {k: v for k, v in lab.ifindexes().items() if k[0] != "r3"} == before
    assert all(carrier(netns[pod], intf) == (True, True) for pod, intf in far_ends)


def switch_transport(lab: Lab, record_property: Any, old: str, new: str) -> None:
    """The ConfigMap's `inter_node_link_type` switched from `old` to `new` and rolled out
    under 10 ms ping loops: every link ends up on `new` and pings, no pod end replaced,
    every Node says `new`; the pings lost per link are reported."""
    config = lab.core.read_namespaced_config_map("meshwire-config", DAEMON_NS)
    text = config.data["config.yaml"]
    switched = text.replace(f"inter_node_link_type: {old}", f"inter_node_link_type: {new}")
    assert switched != text, f"the ConfigMap no longer says inter_node_link_type: {old}"
    lab.core.patch_namespaced_config_map(
        "meshwire-config", DAEMON_NS, {"data": {"config.yaml": switched}}
    )
    before = lab.ifindexes()
    loops = loops_on_cross_node_links(lab)
    try:
        # As `kubectl rollout restart` does.
        restarted = {"kubectl.kubernetes.io/restartedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ")}
        lab.roll_out({"spec": {"template": {"metadata": {"annotations": restarted}}}})
        lab.transport = new
        lab.wait_kinds(new)
        lab.wait_all_ping()
    finally:
        stop_and_report(loops, record_property, f"{old}_to_{new}")
    assert lab.ifindexes() == before, "a pod end was replaced when the transport changed"
    # Each daemon says on its Node what it carries: how the two ends of a link agree.
    said = {
        node.metadata.name: (node.metadata.annotations or {}).get(LINK_TYPE)
        for node in lab.core.list_node().items
    }
    assert said == {node.name: new for node in lab.cluster.nodes}


@pytest.mark.timeout(400)
def test_grpc_configured_and_rolled_out_carries_every_link(lab: Lab, record_property: Any) -> None:
    """The workers the vxlan daemons started are adopted by the grpc daemons in new pods
    (their old root removed under them) and carry the links from then on. Each link
    moves when its second node's daemon says grpc on its Node, on both nodes at once."""
    switch_transport(lab, record_property, "vxlan", "grpc")


@pytest.mark.timeout(600)
def test_a_rollout_across_nodes_under_10ms_pings(lab: Lab, record_property: Any) -> None:
    current = deploy_objects.daemonset_image(lab.deploy)
    tag = f"{current.split(':')[0]}:rollout-{uuid.uuid4().hex[:6]}"
    for node in lab.cluster.nodes:
        node.ctr("images", "tag", f"docker.io/library/{current}", f"docker.io/library/{tag}")
    ds = lab.apps.read_namespaced_daemon_set("meshwire", DAEMON_NS)
    assert ds.spec.update_strategy.rolling_update.max_unavailable == 1
    before = lab.ifindexes()
    loops = loops_on_cross_node_links(lab)
    assert len(loops) == 3
    try:
        time.sleep(1)
        container = {"name": "meshwire", "image": tag}
        pods = lab.roll_out({"spec": {"template": {"spec": {"containers": [container]}}}})
        time.sleep(1)
    finally:
        stop_and_report(loops, record_property, "rollout")
    assert {p.spec.containers[0].image for p in pods.values()} == {tag}
    assert lab.ifindexes() == before, "a link end was rebuilt"
    lab.wait_all_ping()


KNE_NS = "kne"
KNE_PODS = 60
ADD_LINE = re.compile(r"CNI ADD (\S+) timings: .*daemon_ms=([0-9.]+)")


class Milestones:
    """Seconds from `start` until each pod first showed each phase done, read by polling."""

    PHASES = ("scheduled", "init_started", "init_done", "ready")

    def __init__(self, start: float) -> None:
        self.start = start
        self.at: dict[str, dict[str, float]] = {phase: {} for phase in self.PHASES}
        self.links_up = 0.0

    def see(self, pods: list[Any]) -> None:
        now = time.monotonic() - self.start
        for pod in pods:
            name = pod.metadata.name
            inits = pod.status.init_container_statuses or []
            state = inits[0].state if inits else None
            ready = {c.type: c.status for c in pod.status.conditions or []}.get("Ready")
            done = {
                "scheduled": bool(pod.spec.node_name),
                "init_started": state is not None and bool(state.running or state.terminated),
                "init_done": state is not None and bool(state.terminated),
                "ready": ready == "True",
            }
            for phase, reached in done.items():
                if reached:
                    self.at[phase].setdefault(name, now)

    def all_by(self, phase: str, count: int) -> float | None:
        times = self.at[phase]
        return max(times.values()) if len(times) == count else None


def kne_ends_done(lab: Lab, slow_reads: list[str]) -> int:
    """Link ends of the kne namespace that the nodes' /links say are done; -1 when a
    node's /links did not answer in time (its name and the error added to `slow_reads`,
    which the test reports: the poll goes on)."""
    done = 0
    for node in lab.cluster.nodes:
        try:
            report = lab.links_report(node)
        except OSError as exc:
            slow_reads.append(f"{node.name}: {exc!r}")
            return -1
        for entry in report:
            if entry["state"] == "done" and entry["local"]["pod"].startswith(f"{KNE_NS}/"):
                done += 2 if entry["kind"] == "veth" else 1
    return done


def add_seconds(lab: Lab) -> dict[str, float]:
    """Pod name -> the daemon's time (s) in its CNI ADD, from the daemons' logs (the last
    ADD of each kne pod)."""
    out = {}
    for name, pod in lab.wait_daemons().items():
        text = lab.cluster.node(name).container_log(DAEMON_NS, pod, "meshwire", lines=5000)
        for match in ADD_LINE.finditer(text):
            namespace, _, pod_name = match.group(1).partition("/")
            if namespace == KNE_NS:
                out[pod_name] = float(match.group(2)) / 1000
    return out


def spread_of(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 2), "max": round(max(values), 2)}


@pytest.mark.timeout(900)
def test_a_kne_sized_lab_of_60_pods_comes_up_over_three_nodes(
    lab: Lab, record_property: Any
) -> None:
    """60 busybox pods, each with KNE's init-wait, and their 90 links, applied at once as
    KNE does (Topologies, then Pods), spread by the scheduler; the time to each phase
    reported (not asserted): scheduling, sandbox and CNI ADD (the init container
    starts once both are done), the interfaces seen by init-wait, every link done."""
    topologies, pods = ring_lab(KNE_PODS)
    links = ring_links(KNE_PODS)
    create_namespace_for_pods(lab.api_client, KNE_NS, WAIT)
    try:
        seen = Milestones(time.monotonic())
        slow_reads: list[str] = []
        for body in topologies:
            lab.custom.create_namespaced_custom_object(*TOPOLOGY[:2], KNE_NS, TOPOLOGY[2], body)
        for body in pods:
            lab.core.create_namespaced_pod(KNE_NS, body)
        applied = time.monotonic() - seen.start
        deadline = time.monotonic() + 600
        while seen.all_by("ready", KNE_PODS) is None or not seen.links_up:
            assert time.monotonic() < deadline, f"lab not up: {seen.at}"
            seen.see(lab.core.list_namespaced_pod(KNE_NS).items)
            if not seen.links_up and kne_ends_done(lab, slow_reads) == 2 * len(links):
                seen.links_up = time.monotonic() - seen.start
            time.sleep(0.5)
        adds = add_seconds(lab)
        assert sorted(adds) == sorted(body["metadata"]["name"] for body in pods)
        placement = {
            pod.metadata.name: pod.spec.node_name
            for pod in lab.core.list_namespaced_pod(KNE_NS).items
        }
        # Per pod: scheduling (from the apply), the sandbox but its CNI ADD (from
        # scheduled to the init container's start), the CNI ADD (the daemon's time).
        started, scheduled = seen.at["init_started"], seen.at["scheduled"]
        phases = {
            "applied_s": round(applied, 1),
            "all_scheduled_s": round(seen.all_by("scheduled", KNE_PODS) or 0.0, 1),
            "all_links_done_s": round(seen.links_up, 1),
            "all_init_started_s": round(seen.all_by("init_started", KNE_PODS) or 0.0, 1),
            "all_ready_s": round(seen.all_by("ready", KNE_PODS) or 0.0, 1),
            "per_pod_scheduling_s": spread_of(list(scheduled.values())),
            "per_pod_sandbox_but_add_s": spread_of(
                [max(0.0, started[n] - scheduled[n] - adds[n]) for n in started]
            ),
            "per_pod_cni_add_s": spread_of(list(adds.values())),
            "per_node": dict(collections.Counter(placement.values())),
            # A daemon's /links that did not answer within its 10 s timeout.
            "slow_links_reads": slow_reads,
        }
        record_property("kne60_phases", json.dumps(phases))
        print(f"KNE-sized lab, {KNE_PODS} pods and {len(links)} links: {phases}")
        assert len(set(placement.values())) == 3, "the pods did not spread"
        # A sample of the links carries traffic, from inside the pods.
        for uid in range(1, len(links) + 1, len(links) // 6):
            a, _, _, _ = links[uid - 1]
            address = f"10.{200 + uid // 250}.{uid % 250}.2"
            assert lab.pings(f"r{a:02d}", address, KNE_NS), f"link {uid} from r{a:02d}"
    finally:
        lab.core.delete_namespace(KNE_NS, grace_period_seconds=1)
        wait_for(
            f"namespace {KNE_NS}'s pods gone",
            lambda: not lab.core.list_namespaced_pod(KNE_NS).items,
            300,
            IGNORED,
        )


@pytest.mark.timeout(400)
def test_vxlan_configured_again_and_rolled_out_moves_every_link_back(
    lab: Lab, record_property: Any
) -> None:
    """Each link moves back when the first of its nodes' daemons says vxlan on its Node,
    on both nodes at once."""
    switch_transport(lab, record_property, "grpc", "vxlan")
