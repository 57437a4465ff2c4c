"""A real Kubernetes node for the suite: containerd + runc + kubelet v1.20.2, beside a
`ControlPlane` (tests/kube_cluster.py) with kube-controller-manager and kube-scheduler.

`Node(plane, binaries)` keeps everything it makes to itself:
- the node's network is a netns of its own (`mwrn-<id>`): kubelet, containerd, the
  pods' bridge and every hostNetwork pod live there. Its loopback holds the node's
  address (198.18.x.y, the node's InternalIP) and the `kubernetes` Service address
  (10.0.0.1), where a relay thread of this process listens and forwards to the
  control plane on the host's loopback: in-cluster clients (the meshwire DaemonSet)
  reach the API server as on a cluster, with no kube-proxy;
- its files are a mount namespace of its own, held by one `sleep` process, in which
  /run, /var/log are fresh tmpfs and /etc, /opt, /var/lib overlays whose writes land
  in the node's folder: the DaemonSet's hostPaths (/opt/cni/bin, /etc/cni/net.d,
  /run/meshwire, /var/run/netns) are the node's, never the host's;
- kubelet's cgroups live under a cgroup root of its own (`/mwrn-<id>`);
- containerd's CRI runs the CNI chain of /etc/cni/net.d with the one bin dir
  /opt/cni/bin (the bridge, host-local and loopback plugins copied in).

`stop()` deletes the pods through the API (so the CNI DEL runs), stops every process
by its PID, kills the containers' shims of this containerd, removes the cgroups, the
netns and the folder; it is safe after a failed start.

Images are local (nothing is pulled): `busybox:1` (Debian's busybox-static) and the
pause image (a static C program compiled here); `import_image` loads any archive.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from kubernetes.client import CoreV1Api

from meshwire.base.netns_thread import call_in_netns
from meshwire.dataplane import rundir
from meshwire.tools.lab.processes import pids_whose_argv
from tests.busybox_image import busybox_root
from tests.deploy_helpers import config_text
from tests.kube_cluster import ControlPlane
from tests.kube_helpers import admin

if TYPE_CHECKING:
    from tests.kube_underlay import Underlay

NODE_BINARIES = ("kubelet", "kube-scheduler", "kube-controller-manager")
SERVICE_IP = "10.0.0.1"  # ControlPlane's --service-cluster-ip-range=10.0.0.0/24
PAUSE_IMAGE = "meshwire.test/pause:1"
BUSYBOX_IMAGE = "meshwire.test/busybox:1"
CNI_PLUGINS = ("bridge", "host-local", "loopback")
CNI_PLUGIN_DIR = Path("/usr/lib/cni")
START_TIMEOUT = 120.0
POD_SUBNET_PREFIX = "10.244"

PAUSE_C = r"""
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static void leave(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }
int main(void) {
    signal(SIGTERM, leave);
    signal(SIGINT, leave);
    signal(SIGCHLD, reap);
    for (;;) pause();
}
"""

# Run by the holder: the mounts every process of the node sees, then it sleeps.
HOLDER_SH = r"""
set -eu
dir=$1
for top in etc opt var/lib; do
  name=$(echo "$top" | tr / -)
  mkdir -p "$dir/overlay/$name/upper" "$dir/overlay/$name/work"
  layers="lowerdir=/$top,upperdir=$dir/overlay/$name/upper,workdir=$dir/overlay/$name/work"
  mount -t overlay "node-$name" -o "$layers" "/$top"
done
mount -t tmpfs node-run /run
mount -t tmpfs node-log /var/log
mkdir -p /run/netns /run/meshwire /etc/cni/net.d /opt/cni/bin
mount --make-rshared /
touch "$dir/holder.ready"
exec sleep 2147483647
"""


class Relay:
    """Accepts TCP in a netns and pipes each connection to `target` from this process's netns."""

    def __init__(self, netns: str, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.target = target
        self.listener = call_in_netns(netns, lambda: self._listen(listen))
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="node-relay", daemon=True)
        self._thread.start()

    @staticmethod
    def _listen(address: tuple[str, int]) -> socket.socket:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        return sock

    def _accept(self) -> None:
        while not self._closed:
            try:
                inside, _ = self.listener.accept()
            except OSError:
                return
            try:
                outside = socket.create_connection(self.target, timeout=10)
                outside.settimeout(None)
            except OSError:
                inside.close()
                continue
            for a, b in ((inside, outside), (outside, inside)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()


def node_binaries(assets: Path) -> Path:
    """The folder of kube-assets.sh's build, which must hold the node's binaries too."""
    for binary in NODE_BINARIES:
        if not os.access(assets / binary, os.X_OK):
            raise FileNotFoundError(f"{assets / binary}: missing (scripts/kube-assets.sh)")
    for tool in ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables", "gcc"):
        if shutil.which(tool) is None:
            raise FileNotFoundError(f"{tool}: not installed (scripts/setup.sh installs it)")
    for plugin in CNI_PLUGINS:
        if not (CNI_PLUGIN_DIR / plugin).exists():
            raise FileNotFoundError(
                f"{CNI_PLUGIN_DIR / plugin}: missing (containernetworking-plugins)"
            )
    return assets


class Node:
    """One real node (see the module doc). `name` is both the node's and its netns's name.

    Alone, the node's address is on its loopback. With `underlay` (tests/kube_underlay.py)
    it is `ip` on the node's interface to the underlay, where the other nodes reach it
    (vxlan, the wire, the peer RPCs). `controllers=False` starts no kube-scheduler and
    kube-controller-manager: one node of a cluster runs them for all.
    """

    def __init__(
        self,
        plane: ControlPlane,
        binaries: Path,
        *,
        ip: str = "",
        underlay: Underlay | None = None,
        controllers: bool = True,
    ) -> None:
        self.plane = plane
        self.binaries = binaries
        self.underlay = underlay
        self.controllers = controllers
        self.id = secrets.token_hex(3)
        self.name = f"mwrn-{self.id}"
        self.netns = f"/run/netns/{self.name}"
        rng = random.Random()
        self.ip = ip or f"198.18.{rng.randint(1, 254)}.{rng.randint(1, 254)}"
        self.pod_subnet = f"{POD_SUBNET_PREFIX}.{rng.randint(1, 254)}.0/24"
        self.cgroup_root = f"/{self.name}"
        self.dir = Path(tempfile.mkdtemp(prefix="mw-node-"))
        self.logs = self.dir / "logs"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.holder: subprocess.Popen[bytes] | None = None
        self.relay: Relay | None = None
        self._netns_made = False
        self._cgroups: list[Path] = []

    # -- lifecycle --------------------------------------------------------------

    def start(self) -> None:
        try:
            self.logs.mkdir()
            self._make_netns()
            self._start_holder()
            self.relay = Relay(self.netns, (SERVICE_IP, 443), (self.plane.host, self.plane.port))
            self.kubeconfig = self.plane.admin_kubeconfig_for(
                self.dir / "node.kubeconfig", f"https://{SERVICE_IP}:443"
            )
            self._install_cni()
            self._make_cgroup_root()
            self.start_containerd()
            self._import_base_images()
            if self.controllers:
                self._start_controllers()
            self.start_kubelet()
            self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Pods deleted through the API, then every process by PID; safe to call twice."""
        # The controllers first, so no DaemonSet or ReplicaSet makes pods again.
        for name in ("kube-scheduler", "kube-controller-manager"):
            self._stop(name)
        with contextlib.suppress(Exception):
            if self._alive("kubelet") and self._alive("containerd"):
                self._delete_all_pods()
        self._stop("kubelet")
        self._kill_tasks()
        self._stop("containerd")
        self._kill_shims()
        self._stop_workers()
        if self.holder is not None and self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait(timeout=20)
        if self.relay is not None:
            self.relay.close()
        self._remove_cgroups()
        if self._netns_made:
            subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
            self._netns_made = False
        self._umount_under_dir()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _stop_workers(self) -> None:
        """The DaemonSet's dataplane workers outlive its pods by design (they wait for
        the next daemon in /run/meshwire/workers, in a cgroup of the host's): stopped
        by PID through the node's own /run, and their emptied cgroups removed."""
        if self.holder is None or self.holder.poll() is not None:
            return
        dataplane = yaml.safe_load(config_text())["dataplane"]
        rundir.stop_all(f"/proc/{self.holder.pid}/root{dataplane['run_dir']}")
        for group in Path("/sys/fs/cgroup").glob(f"*/{dataplane['worker_cgroup']}"):
            with contextlib.suppress(OSError):  # still used: another node's workers
                group.rmdir()

    # -- the namespaces -------------------------------------------------------------

    def _make_netns(self) -> None:
        subprocess.run(["ip", "netns", "add", self.name], check=True, capture_output=True)
        self._netns_made = True
        commands = [["link", "set", "lo", "up"], ["addr", "add", f"{SERVICE_IP}/32", "dev", "lo"]]
        if self.underlay is None:
            commands.append(["addr", "add", f"{self.ip}/32", "dev", "lo"])
        for command in commands:
            subprocess.run(["ip", "-n", self.name, *command], check=True, capture_output=True)
        if self.underlay is not None:
            self.underlay.attach(self.name, self.ip)

    def _start_holder(self) -> None:
        with (self.logs / "holder.log").open("ab") as out:
            self.holder = subprocess.Popen(
                [
                    "nsenter", f"--net={self.netns}", "--",
                    "unshare", "--mount", "--propagation", "private", "--",
                    "sh", "-c", HOLDER_SH, "holder", str(self.dir),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        self._wait(lambda: (self.dir / "holder.ready").exists(), "the node's mount namespace",
                   proc=self.holder, log="holder")  # fmt: skip

    def root(self, path: str) -> Path:
        """`path` as the node's processes see it (through the holder's root)."""
        assert self.holder is not None
        return Path(f"/proc/{self.holder.pid}/root") / path.lstrip("/")

    def _in_node(self, argv: list[str]) -> list[str]:
        assert self.holder is not None
        return ["nsenter", "-t", str(self.holder.pid), "--net", "--mount", "--", *argv]

    def _install_cni(self) -> None:
        bin_dir = self.root("/opt/cni/bin")
        for plugin in CNI_PLUGINS:
            shutil.copy2(CNI_PLUGIN_DIR / plugin, bin_dir / plugin)
        conflist = {
            "cniVersion": "0.4.0",
            "name": "node",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "mwrnbr0",
                    "isGateway": True,
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.pod_subnet}]],
                        "dataDir": "/run/node-ipam",
                    },
                },
                {"type": "loopback"},
            ],
        }
        (self.root("/etc/cni/net.d") / "10-node.conflist").write_text(json.dumps(conflist))

    def _make_cgroup_root(self) -> None:
        for hierarchy in sorted(Path("/sys/fs/cgroup").iterdir()):
            if hierarchy.name == "unified" or not (hierarchy / "cgroup.procs").exists():
                continue
            group = hierarchy / self.cgroup_root.lstrip("/")
            group.mkdir(exist_ok=True)
            self._cgroups.append(group)

    def _remove_cgroups(self) -> None:
        for group in self._cgroups:
            if not group.exists():
                continue
            for directory in sorted(
                (p for p in group.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
            ):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            with contextlib.suppress(OSError):
                group.rmdir()

    def _umount_under_dir(self) -> None:
        mounts = [
            line.split()[4]
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith(str(self.dir) + "/")
        ]
        for target in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", target], capture_output=True)

    # -- processes --------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str], *, in_node: bool) -> None:
        with (self.logs / f"{name}.log").open("ab") as out:
            self.procs[name] = subprocess.Popen(
                self._in_node(argv) if in_node else argv, stdout=out, stderr=subprocess.STDOUT
            )

    def _alive(self, name: str) -> bool:
        proc = self.procs.get(name)
        return proc is not None and proc.poll() is None

    def _stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        proc = self.procs.get(name)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)

    @property
    def containerd_socket(self) -> Path:
        return self.dir / "containerd" / "containerd.sock"

    def start_containerd(self) -> None:
        state = self.dir / "containerd"
        state.mkdir(exist_ok=True)
        config = state / "config.toml"
        config.write_text(
            f"""version = 2
root = "{state / "root"}"
state = "{state / "state"}"
[grpc]
  address = "{self.containerd_socket}"
[ttrpc]
  address = "{self.containerd_socket}.ttrpc"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  disable_apparmor = true
  # Root here may lack CAP_SYS_RESOURCE: runc then cannot set the negative
  # oom_score_adj CRI asks for; clamp it instead.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
"""
        )
        self._spawn("containerd", ["containerd", "--config", str(config)], in_node=True)
        self._wait(
            lambda: self.ctr("version", check=False).returncode == 0,
            "containerd",
            proc=self.procs["containerd"],
            log="containerd",
        )

    def restart_containerd(self) -> None:
        self._stop("containerd")
        self.start_containerd()

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", "-a", str(self.containerd_socket), "-n", "k8s.io", *args],
            capture_output=True,
            text=True,
            check=check,
        )

    def import_image(self, archive: Path) -> None:
        self.ctr("images", "import", str(archive))

    def _import_base_images(self) -> None:
        images = self.dir / "images"
        pause_root = images / "pause"
        pause_root.mkdir(parents=True)
        (images / "pause.c").write_text(PAUSE_C)
        subprocess.run(
            ["gcc", "-Os", "-static", "-o", str(pause_root / "pause"), str(images / "pause.c")],
            check=True,
            capture_output=True,
        )
        box = busybox_root(images / "busybox")
        mkimage = Path(__file__).resolve().parents[1] / "scripts" / "mkimage.py"
        for root, ref, cmd in (
            (pause_root, PAUSE_IMAGE, ["/pause"]),
            (box, BUSYBOX_IMAGE, ["sh"]),
        ):
            archive = images / f"{root.name}.tar"
            subprocess.run(
                ["python3", str(mkimage), str(root), str(archive), ref, "--cmd", *cmd],
                check=True,
                capture_output=True,
            )
            self.import_image(archive)

    def _start_controllers(self) -> None:
        admin = self.plane.admin_kubeconfig
        pki = self.plane.pki
        self._spawn(
            "kube-controller-manager",
            [
                str(self.binaries / "kube-controller-manager"),
                f"--kubeconfig={admin}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={self.plane.ca_file}",
                "--controllers=*,-nodeipam,-nodelifecycle,-attachdetach,-persistentvolume-binder",
                "--leader-elect=false",
                "--port=0",
                "--secure-port=0",
                "--use-service-account-credentials=false",
                "--concurrent-gc-syncs=5",
                "--v=1",
            ],
            in_node=False,
        )
        self._spawn(
            "kube-scheduler",
            [
                str(self.binaries / "kube-scheduler"),
                f"--kubeconfig={admin}",
                "--leader-elect=false",
                "--port=0",
                "--secure-port=0",
                "--v=1",
            ],
            in_node=False,
        )

    def start_kubelet(self) -> None:
        config = self.dir / "kubelet-config.yaml"
        root_dir = self.dir / "kubelet"
        root_dir.mkdir(exist_ok=True)
        config.write_text(
            f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {self.ip}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: false}}
  x509: {{clientCAFile: {self.plane.ca_file}}}
authorization: {{mode: AlwaysAllow}}
cgroupDriver: cgroupfs
cgroupRoot: {self.cgroup_root}
failSwapOn: false
clusterDomain: cluster.local
clusterDNS: [10.0.0.10]
runtimeRequestTimeout: 5m
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
  nodefs.inodesFree: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
"""
        )
        self._spawn(
            "kubelet",
            [
                str(self.binaries / "kubelet"),
                f"--config={config}",
                f"--kubeconfig={self.kubeconfig}",
                "--container-runtime=remote",
                f"--container-runtime-endpoint=unix://{self.containerd_socket}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.ip}",
                f"--root-dir={root_dir}",
                f"--cert-dir={root_dir / 'pki'}",
                "--v=1",
            ],
            in_node=True,
        )

    def restart_kubelet(self) -> None:
        self._stop("kubelet")
        self.start_kubelet()
        self.wait_ready()

    def stop_runtime(self) -> None:
        """kubelet and containerd stopped (SIGTERM, as a node's service manager stops
        them); the containers run on under their shims, as on a node."""
        self._stop("kubelet")
        self._stop("containerd")

    def start_runtime(self) -> None:
        """containerd and kubelet started again after `stop_runtime`; returns once the
        node is Ready."""
        self.start_containerd()
        self.start_kubelet()
        self.wait_ready()

    def _kill_tasks(self) -> None:
        if not self._alive("containerd"):
            return
        tasks = self.ctr("task", "ls", "-q", check=False).stdout.split()
        for task in tasks:
            self.ctr("task", "kill", "-s", "KILL", task, check=False)

    def _kill_shims(self) -> None:
        """The containers' shims outlive containerd; only those serving this node's socket."""
        marker = str(self.containerd_socket).encode()

        def shim(argv: list[bytes]) -> bool:
            return argv[0].endswith(b"containerd-shim-runc-v2") and marker in argv

        for pid in pids_whose_argv(shim):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    # -- the API's view ------------------------------------------------------------

    @functools.cached_property
    def admin(self) -> Any:
        """The control plane's admin client (kube_helpers.admin), made once."""
        return admin(self.plane)

    def core(self) -> Any:
        return CoreV1Api(self.admin)

    def wait_ready(self) -> None:
        core = self.core()

        def ready() -> bool:
            try:
                node = core.read_node(self.name)
            except Exception:
                return False
            conditions = {c.type: c.status for c in node.status.conditions or []}
            return conditions.get("Ready") == "True"

        self._wait(ready, f"node {self.name} Ready", proc=self.procs["kubelet"], log="kubelet")
        # kubelet taints a node not-ready when it registers; the node lifecycle
        # controller, which would lift it, is off (it would evict on a restart).
        node = core.read_node(self.name)
        taints = [t for t in node.spec.taints or [] if t.key != "node.kubernetes.io/not-ready"]
        if len(taints) != len(node.spec.taints or []):
            core.patch_node(self.name, {"spec": {"taints": [t.to_dict() for t in taints] or None}})

    def _delete_all_pods(self) -> None:
        """The pods bound to this node, deleted (their CNI DEL runs); other nodes' pods
        are theirs to delete. The pods with a network of their own go first: their CNI
        DEL needs the hostNetwork pods (a chained plugin's daemon) still running."""
        core = self.core()
        mine = f"spec.nodeName={self.name}"
        for host_network in (False, True):

            def pods(host_network: bool = host_network) -> list[Any]:
                found = core.list_pod_for_all_namespaces(field_selector=mine).items
                return [p for p in found if bool(p.spec.host_network) == host_network]

            for pod in pods():
                with contextlib.suppress(Exception):
                    core.delete_namespaced_pod(
                        pod.metadata.name, pod.metadata.namespace, grace_period_seconds=1
                    )
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and pods():
                time.sleep(0.5)

    def pod_pid(self, uid: str) -> int:
        """A process of the pod `uid` on this node (any of its containers share its netns)."""
        for hierarchy in ("pids", "memory", "cpu"):
            base = Path("/sys/fs/cgroup") / hierarchy / self.cgroup_root.lstrip("/")
            for procs in sorted(base.glob(f"kubepods/**/pod{uid}/*/cgroup.procs")):
                pids = procs.read_text().split()
                if pids:
                    return int(pids[0])
        raise LookupError(f"no process of pod {uid} under {self.cgroup_root}")

    def container_log(self, namespace: str, pod: Any, container: str, lines: int = 40) -> str:
        """The last `lines` of a container's log, read from the node's /var/log/pods (the
        API server cannot reach this kubelet for `kubectl logs`)."""
        folder = (
            self.root("/var/log/pods")
            / (f"{namespace}_{pod.metadata.name}_{pod.metadata.uid}")
            / container
        )
        logs = sorted(folder.glob("*.log"), key=lambda p: int(p.stem) if p.stem.isdigit() else 0)
        if not logs:
            return f"(no log in {folder})"
        text = logs[-1].read_text(errors="replace").splitlines()[-lines:]
        return "\n".join(text)

    def log_tail(self, name: str, size: int = 3000) -> str:
        try:
            return (self.logs / f"{name}.log").read_text(errors="replace")[-size:]
        except OSError:
            return "(no log)"

    def _wait(
        self,
        condition: Callable[[], bool],
        what: str,
        *,
        proc: subprocess.Popen[bytes] | None = None,
        log: str = "",
        timeout: float = START_TIMEOUT,
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{what}: process exited; log:\n{self.log_tail(log)}")
            if condition():
                return
            time.sleep(0.25)
        raise TimeoutError(f"{what}: not there in {timeout}s; log:\n{self.log_tail(log)}")


@contextlib.contextmanager
def running_node(plane: ControlPlane, binaries: Path) -> Iterator[Node]:
    node = Node(plane, binaries)
    node.start()
    try:
        yield node
    finally:
        node.stop()
