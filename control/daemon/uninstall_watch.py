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
them). The namespace is followed by a `Reflector` (list, then watch): API
failures are logged, retried with its backoff and kept in `last_error`; an
uninstall that fails (a config the daemon cannot write) is logged and retried
with the same policy. `run` returns only by cancellation (once the shim is out,
it idles: the daemon keeps serving the links it has until its pod goes).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from meshwire.control.cni.uninstall import unchain_configs
from meshwire.control.common.config import ApiConfig, default
from meshwire.control.common.retries import Backoff, BackoffPolicy
from meshwire.control.informer.failure import describe
from meshwire.control.informer.reflector import Reflector
from meshwire.control.informer.sources import Namespace

if TYPE_CHECKING:
    from kubernetes.aio.client import ApiClient

log = logging.getLogger(__name__)


class UninstallWatch:
    def __init__(
        self,
        namespace: str,
        conf_dir: str,
        on_uninstall: Callable[[], None],
        *,
        policy: BackoffPolicy | None = None,
        request_timeout: float = default(ApiConfig, "request_timeout"),
        watch_timeout: int = default(ApiConfig, "watch_timeout"),
    ) -> None:
        self.namespace = namespace
        self.conf_dir = Path(conf_dir)
        self.on_uninstall = on_uninstall
        self.policy = policy or BackoffPolicy()
        self.request_timeout = request_timeout
        self.watch_timeout = watch_timeout
        self.uninstalled = asyncio.Event()
        self.checked = asyncio.Event()
        # Why the namespace is going ("gone", "being deleted"); "" while it is not.
        self._going = ""
        # Why the last uninstall failed; "" when none did.
        self._uninstall_error = ""
        self._reflector: Reflector | None = None

    @property
    def last_error(self) -> str:
        """Why reading the namespace, or the uninstall, last failed; "" when neither does."""
        reading = self._reflector.stats.last_error if self._reflector is not None else ""
        return self._uninstall_error or reading

    async def run(self, api: ApiClient) -> None:
        self._reflector = Reflector(
            Namespace(api, self.namespace),
            self,
            request_timeout=self.request_timeout,
            watch_timeout=self.watch_timeout,
            backoff=self.policy,
        )
        await self._reflector.run()  # returns once the namespace is going
        backoff = Backoff(self.policy)
        while not self.uninstalled.is_set():
            try:
                await self._uninstall()
            except Exception as err:  # the config files'
                self._uninstall_error = describe(err)
                delay = backoff.next_delay()
                log.warning(
                    "namespace %s is %s, but taking the shim out failed: %s; retrying in %.1fs",
                    self.namespace, self._going, self._uninstall_error, delay,
                )  # fmt: skip
                await asyncio.sleep(delay)
        await asyncio.get_running_loop().create_future()

    # -- the reflector's handler --------------------------------------------------

    def listed(self, items: list[Any]) -> None:
        if not items:
            self._gone("gone")
        elif _deleting(items[0]):
            self._gone("being deleted")
        else:
            self.checked.set()

    def changed(self, event_type: str, obj: Any) -> None:
        if event_type == "DELETED" or _deleting(obj):
            self._gone("being deleted")

    def _gone(self, why: str) -> None:
        """Hold every link now; the shim is taken out once the reflector stopped."""
        if not self._going:
            self._going = why
            self.on_uninstall()
        assert self._reflector is not None
        self._reflector.stop()

    async def _uninstall(self) -> None:
        done = await asyncio.to_thread(unchain_configs, self.conf_dir)
        self.uninstalled.set()
        self.checked.set()
        self._uninstall_error = ""
        log.warning(
            "namespace %s is %s: meshwire changes no link from now on, and its shim is out "
            "of the CNI chain (%s); links stay",
            self.namespace, self._going, "; ".join(f"{p}: {a}" for p, a in done) or "not in it",
        )  # fmt: skip


def _deleting(obj: Any) -> bool:
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    return isinstance(metadata, dict) and bool(metadata.get("deletionTimestamp"))
