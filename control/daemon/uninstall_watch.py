"""`UninstallWatch`: takes the CNI shim out of the node's chain once meshwire's own
namespace is being deleted (`kubectl delete -k deploy/`).

A rollout, a restart or a deleted daemon pod leaves the namespace alone, and so the
chain; deleting the deployment deletes the namespace first (kustomize lists it
first), which sets its deletionTimestamp before anything else goes. The watch is
already open then, so it hears that even when the ClusterRole goes a moment later.
On hearing it (or finding the namespace Terminating or gone on a list), the daemon
takes meshwire out of every conflist of `cni.conf_dir` (`cni uninstall` without
removing the binary, which DELs of older sandboxes may still run) and calls
`on_uninstall`, which holds the reconciler: deleting the deployment also deletes
the Topology CRD, and with it every Topology, which must not tear links down.
Pods created afterwards are not handed to meshwire; every link made stays.

`checked` is set once the first list answered (the namespace is there, or the
uninstall is done): the daemon reconciles nothing before, so a daemon restarted
while its namespace goes never acts on Topologies being deleted.

Runs only when `cni.deployment_namespace` and `cni.conf_dir` are set (deploy/ sets
them). API failures are logged, retried with backoff and kept in
`last_error`; an uninstall that fails (a config the daemon cannot write) is logged
and retried the same way. `run` returns only by cancellation (once the shim is out,
it idles: the daemon keeps serving the links it has until its pod goes).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubernetes.aio.client.exceptions import ApiException

from meshwire.control.cni.uninstall import unchain_configs
from meshwire.control.common.retries import Backoff, BackoffPolicy
from meshwire.control.informer.failure import describe

if TYPE_CHECKING:
    from kubernetes.aio.client import ApiClient, CoreV1Api

log = logging.getLogger(__name__)


class UninstallWatch:
    def __init__(
        self,
        namespace: str,
        conf_dir: str,
        on_uninstall: Callable[[], None],
        *,
        policy: BackoffPolicy | None = None,
        request_timeout: float = 30.0,
        watch_timeout: int = 300,
    ) -> None:
        self.namespace = namespace
        self.conf_dir = Path(conf_dir)
        self.on_uninstall = on_uninstall
        self.policy = policy or BackoffPolicy()
        self.request_timeout = request_timeout
        self.watch_timeout = watch_timeout
        self.last_error = ""
        self.uninstalled = asyncio.Event()
        self.checked = asyncio.Event()

    async def run(self, api: ApiClient) -> None:
        # Imported here, not with the module: the client's core API module takes 0.3-0.45 s
        # to import, which every daemon paid at start, though only deploy/ runs this watch.
        from kubernetes.aio.client import CoreV1Api

        core = CoreV1Api(api)
        backoff = Backoff(self.policy)
        while not self.uninstalled.is_set():
            try:
                resume = await self._list(core)
                backoff.healthy()
                while resume and not self.uninstalled.is_set():
                    resume = await self._watch(core, resume)
            except Exception as err:  # the API's, the network's, the config files'
                self.last_error = describe(err)
                delay = backoff.next_delay()
                log.warning(
                    "namespace %s: watching for meshwire's removal failed: %s; retrying in %.1fs",
                    self.namespace, self.last_error, delay,
                )  # fmt: skip
                await asyncio.sleep(delay)
        await asyncio.get_running_loop().create_future()

    async def _list(self, core: CoreV1Api) -> str:
        listed = await core.list_namespace(
            field_selector=f"metadata.name={self.namespace}",
            _request_timeout=self.request_timeout,
        )
        items = listed.items or []
        if not items or (items[0].metadata and items[0].metadata.deletion_timestamp):
            await self._uninstall("gone" if not items else "being deleted")
            return ""
        self.last_error = ""
        self.checked.set()
        return str((listed.metadata and listed.metadata.resource_version) or "")

    async def _watch(self, core: CoreV1Api, resource_version: str) -> str:
        """Follows one watch until the server ends it; returns where to resume ("" to list)."""
        response = await core.list_namespace_without_preload_content(
            field_selector=f"metadata.name={self.namespace}",
            watch=True,
            resource_version=resource_version,
            timeout_seconds=self.watch_timeout,
            _request_timeout=float(self.watch_timeout + self.request_timeout),
        )
        try:
            if response.status == 410:
                return ""
            if response.status != 200:
                raise ApiException(status=response.status, reason=await response.text())
            while line := await response.content.readline():
                if not line.strip():
                    continue
                event: dict[str, Any] = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    return ""  # expired or refused: a list says which
                metadata = obj.get("metadata") or {}
                if event.get("type") == "DELETED" or metadata.get("deletionTimestamp"):
                    await self._uninstall("being deleted")
                    return ""
                resource_version = str(metadata.get("resourceVersion") or resource_version)
        finally:
            response.close()
        return resource_version

    async def _uninstall(self, why: str) -> None:
        self.on_uninstall()
        done = await asyncio.to_thread(unchain_configs, self.conf_dir)
        self.uninstalled.set()
        self.checked.set()
        self.last_error = ""
        log.warning(
            "namespace %s is %s: meshwire changes no link from now on, and its shim is out "
            "of the CNI chain (%s); links stay",
            self.namespace, why, "; ".join(f"{p}: {a}" for p, a in done) or "not in it",
        )  # fmt: skip
