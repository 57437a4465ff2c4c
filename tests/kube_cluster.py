"""A real Kubernetes control plane for the suite: etcd + kube-apiserver on loopback.

`ControlPlane(assets)` runs the binaries of `scripts/kube-assets.sh` (envtest's
`KUBEBUILDER_ASSETS` convention) on a free 127.x address of the host's loopback
and free ports, as a cluster's API server runs: HTTPS with a private CA
(openssl), client-certificate authentication (the admin is in
`system:masters`), `--authorization-mode=RBAC`, and a service-account issuer
and signing key, so ServiceAccount tokens (TokenRequest) authenticate. There is
no controller manager, kubelet or scheduler: objects are stored, never acted on
(a deleted namespace stays Terminating).

Every process is stopped by its PID and the temporary folder removed in
`stop()`, also after a failed start. The destructive helpers (`kill_apiserver`,
`pause_apiserver`, `compact`) act on this control plane alone.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.paths import REPO

ASSETS_SCRIPT = REPO / "scripts" / "kube-assets.sh"
START_TIMEOUT = 120.0
ISSUER = "https://kubernetes.default.svc.cluster.local"


def assets() -> Path:
    """The folder holding kube-apiserver and etcd (built once if need be, see the script)."""
    out = subprocess.run(
        ["bash", str(ASSETS_SCRIPT)], check=True, stdout=subprocess.PIPE, text=True
    ).stdout
    folder = Path(out.strip().splitlines()[-1])
    for binary in ("kube-apiserver", "etcd"):
        if not os.access(folder / binary, os.X_OK):
            raise FileNotFoundError(f"{folder / binary}: missing (scripts/kube-assets.sh)")
    return folder


def free_address() -> tuple[str, list[int]]:
    """A random 127.x.y.z with three ports free on it (bound once to check)."""
    rng = random.Random()
    while True:
        host = f"127.{rng.randint(16, 250)}.{rng.randint(0, 255)}.{rng.randint(2, 250)}"
        socks = []
        try:
            for _ in range(3):
                sock = socket.socket()
                socks.append(sock)
                sock.bind((host, 0))
            return host, [s.getsockname()[1] for s in socks]
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


class ControlPlane:
    """etcd + kube-apiserver on `host`; `admin_kubeconfig` is a system:masters kubeconfig."""

    def __init__(self, binaries: Path, *, watch_cache: bool = True) -> None:
        self.binaries = binaries
        self.watch_cache = watch_cache
        self.dir = Path(tempfile.mkdtemp(prefix="mw-kube-"))
        self.host, (self.port, self.etcd_port, self.peer_port) = free_address()
        self.url = f"https://{self.host}:{self.port}"
        self.pki = self.dir / "pki"
        self.ca_file = self.pki / "ca.crt"
        self.admin_kubeconfig = self.dir / "admin.kubeconfig"
        self.etcd: subprocess.Popen[bytes] | None = None
        self.apiserver: subprocess.Popen[bytes] | None = None
        self.apiserver_log = self.dir / "kube-apiserver.log"
        self.audit_log = self.dir / "audit.log"

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        try:
            self._make_pki()
            self._write_kubeconfig(self.admin_kubeconfig, cert="admin")
            self._start_etcd()
            self.start_apiserver()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop both processes by PID and remove the folder; safe to call twice."""
        for proc in (self.apiserver, self.etcd):
            if proc is None or proc.poll() is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=20)
        shutil.rmtree(self.dir, ignore_errors=True)

    def start_apiserver(self) -> None:
        """Start kube-apiserver (again) and wait until /readyz says ok."""
        p = self.pki
        policy = self.dir / "audit-policy.yaml"
        policy.write_text("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n")
        args = [
            str(self.binaries / "kube-apiserver"),
            f"--etcd-servers=http://{self.host}:{self.etcd_port}",
            f"--bind-address={self.host}",
            f"--advertise-address={self.host}",
            f"--secure-port={self.port}",
            "--insecure-port=0",
            f"--tls-cert-file={p / 'apiserver.crt'}",
            f"--tls-private-key-file={p / 'apiserver.key'}",
            f"--client-ca-file={self.ca_file}",
            "--authorization-mode=RBAC",
            # As on a cluster: the meshwire DaemonSet runs privileged.
            "--allow-privileged=true",
            f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={p / 'sa.pub'}",
            f"--service-account-signing-key-file={p / 'sa.key'}",
            f"--api-audiences={ISSUER}",
            "--service-cluster-ip-range=10.0.0.0/24",
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--profiling=false",
            f"--watch-cache={'true' if self.watch_cache else 'false'}",
            "--v=1",
        ]
        with self.apiserver_log.open("ab") as out:
            self.apiserver = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        self.wait_ready()

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        context = self.ssl_context(client=True)
        last = ""
        while time.monotonic() < deadline:
            if self.apiserver is None or self.apiserver.poll() is not None:
                raise RuntimeError(f"kube-apiserver exited; log:\n{self._log_tail()}")
            try:
                with urllib.request.urlopen(
                    f"{self.url}/readyz", context=context, timeout=5
                ) as reply:
                    if reply.read() == b"ok":
                        return
            except (OSError, urllib.error.URLError) as err:
                last = str(err)
            time.sleep(0.25)
        raise TimeoutError(
            f"kube-apiserver not ready in {timeout}s ({last}); log:\n{self._log_tail()}"
        )

    def kill_apiserver(self) -> None:
        """SIGKILL the apiserver and reap it; `start_apiserver()` brings it back."""
        assert self.apiserver is not None
        self.apiserver.kill()
        self.apiserver.wait(timeout=20)

    def pause_apiserver(self) -> None:
        """SIGSTOP: its sockets stay open and answer nothing (a half-open server)."""
        assert self.apiserver is not None
        self.apiserver.send_signal(signal.SIGSTOP)

    def resume_apiserver(self) -> None:
        assert self.apiserver is not None
        self.apiserver.send_signal(signal.SIGCONT)

    # -- etcd -----------------------------------------------------------------

    def _start_etcd(self) -> None:
        data = self.dir / "etcd"
        etcd_url = f"http://{self.host}:{self.etcd_port}"
        peer_url = f"http://{self.host}:{self.peer_port}"
        with (self.dir / "etcd.log").open("ab") as out:
            self.etcd = subprocess.Popen(
                [
                    str(self.binaries / "etcd"),
                    "--name=mw",
                    f"--data-dir={data}",
                    f"--listen-client-urls={etcd_url}",
                    f"--advertise-client-urls={etcd_url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=mw={peer_url}",
                    "--unsafe-no-fsync",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.etcd.poll() is not None:
                raise RuntimeError(f"etcd exited: {(self.dir / 'etcd.log').read_text()[-2000:]}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{etcd_url}/health", timeout=2) as reply,
            ):
                if json.loads(reply.read()).get("health") == "true":
                    return
            time.sleep(0.2)
        raise TimeoutError("etcd not healthy")

    def _etcd(self, path: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(
            f"http://{self.host}:{self.etcd_port}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.loads(reply.read())

    def revision(self) -> int:
        """etcd's current revision (what resourceVersions count)."""
        reply = self._etcd("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})
        return int(reply["header"]["revision"])

    def compact(self) -> int:
        """Compact etcd at its current revision; every older revision is gone. Returns it."""
        revision = self.revision()
        self._etcd("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    # -- credentials ----------------------------------------------------------

    def ssl_context(self, *, client: bool = False) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if client:
            context.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return context

    def admin_kubeconfig_for(self, path: Path, server: str) -> Path:
        """The admin's kubeconfig with another server address (a relay to this one)."""
        self._write_kubeconfig(path, cert="admin", server=server)
        return path

    def kubeconfig_for_token(self, path: Path, token: str, server: str = "") -> Path:
        """A kubeconfig that authenticates with `token` (a ServiceAccount's)."""
        self._write_kubeconfig(path, token=token, server=server)
        return path

    def _write_kubeconfig(
        self, path: Path, *, cert: str = "", token: str = "", server: str = ""
    ) -> None:
        if cert:
            user = (
                f"client-certificate-data: {_b64(self.pki / (cert + '.crt'))}, "
                f"client-key-data: {_b64(self.pki / (cert + '.key'))}"
            )
        else:
            user = f"token: {token}"
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            "clusters:\n- name: mw\n"
            f"  cluster: {{server: {server or self.url}, "
            f"certificate-authority-data: {_b64(self.ca_file)}}}\n"
            f"users:\n- name: u\n  user: {{{user}}}\n"
            "contexts:\n- name: mw\n  context: {cluster: mw, user: u}\n"
            "current-context: mw\n"
        )
        path.chmod(0o600)

    def _make_pki(self) -> None:
        p = self.pki
        p.mkdir(parents=True)
        _openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
            "-out", "ca.crt", "-days", "30", "-subj", "/CN=meshwire-test-ca", cwd=p,
        )  # fmt: skip
        (p / "srv.ext").write_text(
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\n"
            f"subjectAltName=IP:{self.host},IP:10.0.0.1,DNS:localhost,DNS:kubernetes,"
            "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
        )
        (p / "cli.ext").write_text(
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=clientAuth\n"
        )
        for name, subject, ext in (
            ("apiserver", "/CN=kube-apiserver", "srv.ext"),
            ("admin", "/O=system:masters/CN=meshwire-test-admin", "cli.ext"),
        ):
            _openssl(
                "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                "-out", f"{name}.csr", "-subj", subject, cwd=p,
            )  # fmt: skip
            _openssl(
                "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.crt", "-days", "30", "-extfile", ext, cwd=p,
            )  # fmt: skip
        _openssl("genrsa", "-out", "sa.key", "2048", cwd=p)
        _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=p)

    def _log_tail(self) -> str:
        try:
            return self.apiserver_log.read_text(errors="replace")[-3000:]
        except OSError:
            return "(no log)"
