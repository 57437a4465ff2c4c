"""Talking to the suite's real control plane (`kube_cluster.py`) as its admin, with the
official `kubernetes` client: install and remove a Topology CRD, make namespaces
(and finish their deletion, as the namespace controller the suite does not run
would), ServiceAccounts and their tokens. Also `Gate`, a TCP forwarder a test can
cut between a client and the server, and `DaemonProcess`, `meshwire daemon` as a
process of its own talking to the server."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from meshwire.control.model.topology import GROUP, PLURAL, VERSION
from tests.kube_cluster import ControlPlane, free_address

CRD_NAME = f"{PLURAL}.{GROUP}"
WAIT = 60.0
T = TypeVar("T")


def admin(plane: ControlPlane) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(plane.admin_kubeconfig), client_configuration=configuration
    )
    return client.ApiClient(configuration)


def raw(api: client.ApiClient, method: str, path: str, body: Any = None) -> Any:
    """One request as JSON in and out (for APIs the client has no class for, e.g. v1beta1 CRDs)."""
    request = api.param_serialize(
        method=method,
        resource_path=path,
        body=body,
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*request)
    response.read()
    reply = api.response_deserialize(response, {"2XX": "object"}).data
    return reply


def wait_for(
    what: str,
    probe: Callable[[], T | None],
    timeout: float = WAIT,
    ignoring: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll `probe` until it returns something other than None/False; raise naming `what`.

    An exception of `ignoring` from `probe` counts as not yet (an object on its way, a
    server restarting); the last one is named if time runs out."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = probe()
        except ignoring as err:
            last, value = err, None
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            why = f" (last: {last!r})" if last is not None else ""
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}{why}")
        time.sleep(0.1)


def _served(api: client.ApiClient, group: str, version: str, plural: str) -> bool:
    try:
        raw(api, "GET", f"/apis/{group}/{version}/{plural}?limit=1")
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def install_crd(api: client.ApiClient, path: Path) -> dict[str, Any]:
    """Create the CRD in `path` (v1 or v1beta1) and wait until its objects are served."""
    crd = yaml.safe_load(path.read_text())
    crd.pop("status", None)
    version = crd["apiVersion"]
    name = crd["metadata"]["name"]
    spec = crd["spec"]
    served = (spec["group"], spec["versions"][0]["name"], spec["names"]["plural"])
    raw(api, "POST", f"/apis/{version}/customresourcedefinitions", crd)

    def established() -> bool:
        got = raw(api, "GET", f"/apis/{version}/customresourcedefinitions/{name}")
        conditions = (got.get("status") or {}).get("conditions") or []
        ok = any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
        return ok and _served(api, *served)

    wait_for(f"CRD {path.name} established", established)
    return dict(crd)


def uninstall_crd(api: client.ApiClient, name: str = CRD_NAME) -> None:
    """Delete CRD `name` (the Topology CRD by default), and with it its objects, and wait
    until it is gone."""
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
    try:
        raw(api, "DELETE", path)
    except ApiException as err:
        if err.status != 404:
            raise

    def gone() -> bool:
        try:
            raw(api, "GET", path)
        except ApiException as err:
            if err.status == 404:
                return True
            raise
        return False

    wait_for(f"CRD {name} deleted", gone)
    if name == CRD_NAME:
        wait_for("Topology objects no longer served",
                 lambda: not _served(api, GROUP, VERSION, PLURAL))  # fmt: skip


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_namespace(api: client.ApiClient, name: str) -> str:
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name


def create_namespace_for_pods(api: client.ApiClient, name: str, timeout: float = WAIT) -> str:
    """A namespace pods can be made in: v1.20 admits no pod in a namespace until the token
    controller gave its default ServiceAccount a token ("No API token found ... retry
    after"), a moment after the namespace."""
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    wait_for(
        f"namespace {name}'s default ServiceAccount with a token",
        lambda: core.read_namespaced_service_account("default", name).secrets or None,
        timeout,
        (ApiException,),
    )
    return name


def delete_namespace(api: client.ApiClient, name: str) -> None:
    """Request deletion (the suite runs no namespace controller: the objects in it are
    deleted by the test that made them)."""
    try:
        client.CoreV1Api(api).delete_namespace(name)
    except ApiException as err:
        if err.status != 404:
            raise


def service_account_token(
    api: client.ApiClient, namespace: str, name: str, seconds: int = 3600
) -> str:
    """A bound token of ServiceAccount `namespace/name` (created if missing), via TokenRequest."""
    core = client.CoreV1Api(api)
    try:
        core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    except ApiException as err:
        if err.status != 409:
            raise
    request = {"spec": {"audiences": None, "expirationSeconds": seconds}}
    reply = core.create_namespaced_service_account_token(name, namespace, request)
    return str(reply.status.token)


def topologies(api: client.ApiClient, namespace: str) -> dict[str, dict[str, Any]]:
    """The Topology objects in `namespace` by name, as the server has them."""
    listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL
    )
    return {item["metadata"]["name"]: item for item in listed["items"]}


class Gate:
    """A TCP forwarder between a client and the API server that the test can cut.

    `close()` drops every connection and refuses new ones (the client sees its
    watch break and its reconnects refused); `open()` lets them through again.
    Runs on the test's event loop.
    """

    def __init__(self, host: str, target: tuple[str, int]) -> None:
        self.host = host
        self.port = 0
        self._target = target
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def open(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers.difference_update((writer, up_writer))


class DaemonProcess:
    """`meshwire daemon` as a process of its own, talking to a real API server.

    `config` holds the keys over the harness's (node `node1` at a free 127.x address of
    the host's loopback, where its dataplane workers listen, its
    CNI socket and sandbox store under `folder`, /readyz on `host`:`port`, no
    reserved ports). `wrap` prefixes the command (e.g. `unshare --mount ...`).
    Stopped by its PID with SIGTERM (SIGKILL after 20 s) in `stop()`.
    """

    def __init__(
        self,
        folder: Path,
        host: str,
        port: int,
        config: dict[str, Any],
        wrap: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.metrics = f"{host}:{port}"
        # The workers bind their ports on the node's address, as on a node.
        self.node_ip = free_address()[0]
        settings: dict[str, Any] = {
            "node_name": "node1",
            "node_ip": self.node_ip,
            "reserve_ports": False,
            "cni": {"socket": str(folder / "cni.sock"), "state_dir": str(folder / "sandboxes")},
            "metrics": {"listen": self.metrics},
            "reconcile": {"full_interval": 3600.0},
            "log": {"format": "text"},
        }
        for key, value in config.items():
            if isinstance(value, dict):
                settings.setdefault(key, {}).update(value)
            else:
                settings[key] = value
        path = folder / "config.yaml"
        path.write_text(yaml.safe_dump(settings))
        self.log = folder / "daemon.log"
        argv = [sys.executable, "-m", "meshwire.tools.cli", "daemon", "--config", str(path)]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*(wrap or []), *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
            )

    def readyz(self) -> tuple[int, str] | None:
        """(status, body) of /readyz, None while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://{self.metrics}/readyz", timeout=5) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()
        except OSError:
            if self.proc.poll() is not None:
                raise AssertionError(f"the daemon exited: {self.log.read_text()[-3000:]}") from None
            return None

    def wait_readyz(self, what: str, test: Callable[[int, str], bool]) -> str:
        def probe() -> str | None:
            answer = self.readyz()
            return answer[1] if answer is not None and test(*answer) else None

        try:
            return wait_for(what, probe)
        except TimeoutError as err:
            raise AssertionError(f"{err}; last /readyz {self.readyz()}") from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)


def finish_namespace_deletion(api: client.ApiClient, name: str) -> None:
    """Complete a namespace's deletion as the namespace controller would (the suite runs
    none): its `kubernetes` finalizer removed, it goes, and the name can be made again."""
    try:
        current = client.CoreV1Api(api).read_namespace(name)
    except ApiException as err:
        if err.status == 404:
            return
        raise
    if current.metadata.deletion_timestamp is None:
        delete_namespace(api, name)
    raw(api, "PUT", f"/api/v1/namespaces/{name}/finalize",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name},
         "spec": {"finalizers": []}})  # fmt: skip

    def gone() -> bool:
        try:
            client.CoreV1Api(api).read_namespace(name)
        except ApiException as err:
            if err.status == 404:
                return True
            raise
        return False

    wait_for(f"namespace {name} gone", gone)
