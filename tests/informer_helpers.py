"""Shared pieces of the informer tests: objects, a recording sink, a running informer.

`RecordingSink` wraps the real `Table` and keeps the log of writes the
informer made (`upsert ns/name`, `delete ns/name`, `initialized`): tests assert
that log, as statedb's scripts assert the log of operations.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from kubernetes.aio.client import ApiClient, CustomObjectsApi

from meshwire.base.netns_thread import setns
from meshwire.control.common.retries import BackoffPolicy
from meshwire.control.informer.client import make_api_client
from meshwire.control.informer.informer import Informer, InformerOptions
from meshwire.control.informer.sink import TableSink
from meshwire.control.model.topology import API_VERSION, GROUP, KIND, PLURAL, VERSION, Topology
from meshwire.control.tables.table import Table
from meshwire.tools.api.server import ApiServer
from meshwire.tools.lab import netns
from meshwire.tools.lab.lab_names import resolve
from tests.api_helpers import serving as api_serving

# Generous: a bounded wait for a condition, never a timing assertion.
WAIT = 15.0

# Fast reconnects so a test spends no time in backoff; short server timeouts
# so the half-open test's client timeout (watch + request timeout) is seconds.
FAST = InformerOptions(
    page_size=2,
    request_timeout=2.0,
    watch_timeout=2,
    backoff=BackoffPolicy(initial=0.05, maximum=0.2, reset_after=60.0),
)


@contextlib.contextmanager
def private_loopback() -> Iterator[str]:
    """Run the calling thread in a fresh network namespace `mwt<hex>` with only `lo` up.

    The servers these tests start listen on 127.0.0.1 of their own namespace:
    the machine's loopback may be unusable (a sandbox can disable it) and is
    shared with other tests. Only the calling thread moves, and it moves back
    on exit, even on failure; the namespace is deleted then. A socket keeps
    the namespace it was made in, so no test traffic leaves it.
    """
    name = f"mwt{secrets.token_hex(4)}"
    netns.create(name)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns(resolve(name))
        try:
            yield name
        finally:
            setns(f"/proc/self/fd/{home}")
    finally:
        os.close(home)
        netns.delete(name)


@contextlib.asynccontextmanager
async def serving(db: Path, port: int = 0) -> AsyncIterator[ApiServer]:
    """The embedded API on `port` (0: any) of the current netns, with fast bookmarks."""
    async with api_serving(str(db), port=port, bookmark_interval=0.2) as server:
        yield server


@contextlib.asynccontextmanager
async def client(url: str) -> AsyncIterator[ApiClient]:
    """The official client on `url`, closed on exit."""
    api = await make_api_client(url, "")
    try:
        yield api
    finally:
        await api.close()  # type: ignore[no-untyped-call]


def topology(
    name: str, *peers: str, namespace: str = "default", src_ip: str = ""
) -> dict[str, Any]:
    """A Topology object as a user would apply it: one link per peer, eth1.. in order."""
    links = [
        {"uid": i + 1, "peer_pod": peer, "local_intf": f"eth{i + 1}", "peer_intf": f"eth{i + 1}"}
        for i, peer in enumerate(peers)
    ]
    obj: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"links": links},
    }
    if src_ip:
        obj["status"] = {"src_ip": src_ip}
    return obj


class Recorder:
    """A `Reflector`'s handler that records what it is handed, by object name:
    `list ['r1', 'r2']`, `ADDED r3`, `DELETED r1`."""

    def __init__(self) -> None:
        self.log: list[str] = []
        # Called with each entry as it is logged: a test may stop the reflector there.
        self.on_entry: Callable[[str], None] | None = None

    def listed(self, items: list[Any]) -> None:
        self._add(f"list {sorted(i['metadata']['name'] for i in items)}")

    def changed(self, event_type: str, obj: Any) -> None:
        self._add(f"{event_type} {obj['metadata']['name']}")

    def _add(self, entry: str) -> None:
        self.log.append(entry)
        if self.on_entry is not None:
            self.on_entry(entry)

    def take(self) -> list[str]:
        out, self.log = self.log, []
        return out


class RecordingSink(TableSink):
    """A `TableSink` that also logs each write the informer makes."""

    def __init__(self) -> None:
        super().__init__(Table[Topology]("topologies"))
        self.log: list[str] = []
        # Runs right after the first list is applied, before any watch opens.
        self.after_initialized: Callable[[], None] | None = None

    def upsert(self, topology: Topology) -> int:
        self.log.append(f"upsert {topology.key}")
        return super().upsert(topology)

    def delete(self, key: str) -> Topology | None:
        self.log.append(f"delete {key}")
        return super().delete(key)

    def mark_initialized(self) -> None:
        self.log.append("initialized")
        super().mark_initialized()
        if self.after_initialized is not None:
            self.after_initialized()

    def take_log(self) -> list[str]:
        out, self.log = self.log, []
        return out

    def state(self) -> dict[str, dict[str, Any]]:
        """Every row as `{key: object dict}`, comparable with `server_state`."""
        return {key: _comparable(topo.to_dict()) for key, topo in _rows(self.table)}


def _rows(table: Table[Topology]) -> list[tuple[str, Topology]]:
    return [(row.key, row.obj) for row in table.rows()]


def _comparable(obj: dict[str, Any]) -> dict[str, Any]:
    """What the informer keeps of an object: name, namespace, resourceVersion, spec, status."""
    meta = obj.get("metadata") or {}
    return {
        "namespace": meta.get("namespace", "default"),
        "name": meta.get("name"),
        "resourceVersion": str(meta.get("resourceVersion") or ""),
        "spec": Topology.from_dict(obj).to_dict()["spec"],
        "status": Topology.from_dict(obj).to_dict()["status"],
    }


async def server_state(api: ApiClient) -> dict[str, dict[str, Any]]:
    """Every Topology the server holds, in `RecordingSink.state()`'s shape."""
    page: Any = await CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, PLURAL)
    out = {}
    for item in page["items"]:
        view = _comparable(item)
        out[f"{view['namespace']}/{view['name']}"] = view
    return out


async def wait_until(
    condition: Callable[[], bool] | Callable[[], Awaitable[bool]], what: str, within: float = WAIT
) -> None:
    """Poll `condition` until true; fail naming `what` after `within` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.02)


async def wait_converged(sink: RecordingSink, api: ApiClient, within: float = WAIT) -> None:
    """Wait until the table holds exactly what the server holds (asserted on failure, to
    show the difference)."""
    last: dict[str, Any] = {}

    async def equal() -> bool:
        nonlocal last
        last = await server_state(api)
        return sink.state() == last

    try:
        await wait_until(equal, "the table to equal the server's state", within)
    except AssertionError:
        assert sink.state() == last
        raise


@contextlib.asynccontextmanager
async def running(
    api: ApiClient, sink: RecordingSink, options: InformerOptions = FAST
) -> AsyncIterator[Informer]:
    """An informer running in a task; cancelled (and awaited) on exit, even on failure."""
    informer = Informer(api, sink, options)
    task = asyncio.create_task(informer.run())
    try:
        yield informer
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class Cluster:
    """A user's view of the API: apply, patch and delete Topology objects."""

    def __init__(self, api: ApiClient, namespace: str = "default") -> None:
        self.objects = CustomObjectsApi(api)
        self.namespace = namespace

    async def create(self, obj: dict[str, Any]) -> None:
        await self.objects.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, obj
        )

    async def relink(self, name: str, *peers: str) -> None:
        """Replace the links of `name` with one link per peer (a spec change)."""
        spec = topology(name, *peers)["spec"]
        await self.objects.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name, {"spec": spec}
        )

    async def set_src_ip(self, name: str, src_ip: str) -> None:
        """What a node's daemon does when the pod starts there (a status change)."""
        await self.objects.patch_namespaced_custom_object_status(
            GROUP, VERSION, self.namespace, PLURAL, name, {"status": {"src_ip": src_ip}}
        )

    async def delete(self, name: str) -> None:
        await self.objects.delete_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name
        )
