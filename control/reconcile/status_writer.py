"""Writes Topology status fields to the API: coalesced, rate-limited, retried, never dropped.

Reconcilers and the CNI endpoint call `set("ns/name", src_ip=..., ...)` as often
as they like; it only records the desired fields (latest value wins, fields
merge). Background workers turn each key's recorded fields into ONE merge
patch of the `status` subresource: no GET first, at most one write in flight
per key, all writes together under a token bucket. Only fields set since the
key's last successful write are sent; fields not named are left as they are
in the API (merge-patch semantics).

A failed write is retried with the key's backoff (`retries.py`), its fields
merged under any set meanwhile; it is never dropped. A write answered 404
(the Topology was deleted) is dropped with a log line. A write answered 422
(the cluster's Topology CRD rejects the values: a schema stricter than
meshnet's) is dropped with one warning carrying the server's message, never
retried: the same values would be rejected forever. The table keeps the
placement it was told (the listener hears nothing), so the node's links stay
where its pods run and nothing writes the rejected values again.

A write may be conditional (`if_container`): it lands only while the
status still names that container, "" for none (checked against a fresh
read, the patch carrying the read's resourceVersion as a precondition; a 409
is retried). CNI DEL clears a pod's placement this way: a clear delayed by
retries (the API down) must not wipe the placement another node wrote
meanwhile for the pod's new sandbox; and the placement keeper writes a
placement back only while the status names no container. A condition is
replaced only by a write that names a container (a new placement); other
fields set meanwhile join the conditional write. A write whose condition no
longer holds is dropped.

A `listener` (the topologies table) hears of each write that landed, with
the resourceVersion the object reached, and of each dropped one, with the
placement the API had when a condition failed.

Lifecycle: `start()` on the running loop, `set()` any number of times,
`await written(key)` to wait until one topology's fields are written (CNI ADD
and DEL answer only then), `await flush()` to wait until everything recorded
is written, `await close()`;
after close `set()` is a no-op and anything unwritten is abandoned.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, Protocol, cast

from kubernetes.aio.client import ApiClient, ApiException, CustomObjectsApi

from meshwire.control.common.clock import Clock, MonotonicClock
from meshwire.control.common.config import ApiConfig, ReconcileConfig, default
from meshwire.control.common.media import MERGE_PATCH
from meshwire.control.common.queue import WorkQueue
from meshwire.control.common.retries import ExponentialBackoff, RateLimiter, TokenBucket
from meshwire.control.informer.failure import describe
from meshwire.control.model.topology import GROUP, PLURAL, VERSION
from meshwire.control.tables.local_placements import StatusRead

log = logging.getLogger(__name__)

# The status fields this daemon owns: meshnet's, named as meshnet names them, and
# meshwire's `link_rebuilds` (rebuilds.py), which a CRD that prunes unknown fields
# (KNE's) drops from the write without failing it.
STATUS_FIELDS = frozenset({"src_ip", "net_ns", "container_id", "plumbing_error", "link_rebuilds"})
# Those that say where a pod runs.
PLACEMENT_FIELDS = ("src_ip", "net_ns", "container_id")

# 50 writes/s with a burst of 100 per node, the kubelet's own API client limits
# (kubeAPIQPS/kubeAPIBurst since Kubernetes 1.27): at most what each node's
# kubelet already sends for the same pods. A node booting a hundred pods at
# once has every status out immediately, and each CNI ADD (which answers once
# its placement is written) waits for no token in a lab's start or a run of
# restarts. Four writes in flight hide the round trip without queueing a crowd
# at the API server.
DEFAULT_WRITE_RATE: float = default(ReconcileConfig, "status_rate")
DEFAULT_WRITE_BURST = 100
DEFAULT_WRITERS = 4
# A half-open connection must not hold a writer forever; the write is retried.
DEFAULT_REQUEST_TIMEOUT: float = default(ApiConfig, "request_timeout")


class StatusNotFound(Exception):
    """The Topology whose status was written does not exist (HTTP 404)."""


class StatusInvalid(Exception):
    """The API server rejects the write's values (HTTP 422); the message is the server's."""


class StatusSuperseded(Exception):
    """A conditional write's container is no longer the one the status names; `read`
    says what the status names instead, when known."""

    def __init__(self, message: str, read: StatusRead | None = None) -> None:
        super().__init__(message)
        self.read = read


class StatusApi(Protocol):
    async def patch_status(
        self, namespace: str, name: str, status: dict[str, str], if_container: str | None = None
    ) -> str:
        """Merge `status` into the Topology's status subresource; with `if_container`,
        only while `status.container_id` is that container. Returns the object's
        resourceVersion after the write ("" if the server did not say).

        Raises StatusNotFound if the object does not exist, StatusSuperseded if
        the condition does not hold, StatusInvalid if the server rejects the
        values (422); any other exception is a failed write that
        the caller retries.
        """
        ...


class WriteListener(Protocol):
    def status_landed(self, key: str, fields: Mapping[str, str], resource_version: str) -> None:
        """`fields` of Topology `key` are in the API, whose object is now at `resource_version`."""
        ...

    def status_dropped(
        self, key: str, fields: Mapping[str, str], read: StatusRead | None = None
    ) -> None:
        """`fields` of Topology `key` will not be written (object gone, condition failed);
        for a failed condition, `read` is what the API had instead."""
        ...


class KubeStatusApi:
    """`StatusApi` over the official client (`kubernetes.aio`), for any API server URL.

    The caller owns `api_client` and closes it.
    """

    def __init__(
        self, api_client: ApiClient, request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    ) -> None:
        self._api = CustomObjectsApi(api_client)
        self._timeout = request_timeout

    async def patch_status(
        self, namespace: str, name: str, status: dict[str, str], if_container: str | None = None
    ) -> str:
        body: dict[str, Any] = {"status": status}
        topology: dict[str, Any] = {
            "group": GROUP,
            "version": VERSION,
            "namespace": namespace,
            "plural": PLURAL,
            "name": name,
        }
        try:
            if if_container is not None:
                reply = await self._api.get_namespaced_custom_object_status(
                    **topology, _request_timeout=self._timeout
                )
                current = cast(dict[str, Any], reply)  # the object as JSON
                status_now = current.get("status") or {}
                holder = status_now.get("container_id", "")
                if holder != if_container:
                    raise StatusSuperseded(
                        f"topology {namespace}/{name}: status names container "
                        f"{holder or '(none)'}, not {if_container}",
                        StatusRead(
                            {field: str(status_now.get(field) or "") for field in PLACEMENT_FIELDS},
                            str(current["metadata"].get("resourceVersion") or ""),
                        ),
                    )
                # A precondition: 409 Conflict if the object changed since the read.
                body["metadata"] = {"resourceVersion": current["metadata"]["resourceVersion"]}
            written = await self._api.patch_namespaced_custom_object_status(
                **topology,
                body=body,
                # The client's default for a dict body is merge patch too; naming
                # it keeps a client upgrade from turning this into a replace.
                _content_type=MERGE_PATCH,
                _request_timeout=self._timeout,
            )
        except ApiException as err:
            if err.status == 404:
                raise StatusNotFound(f"topology {namespace}/{name}: not found") from err
            if err.status == 422:
                raise StatusInvalid(describe(err)) from err
            raise
        metadata = written.get("metadata") if isinstance(written, dict) else None
        return str((metadata or {}).get("resourceVersion") or "")


class StatusWriter:
    def __init__(
        self,
        api: StatusApi,
        *,
        clock: Clock | None = None,
        rate: float = DEFAULT_WRITE_RATE,
        burst: int = DEFAULT_WRITE_BURST,
        writers: int = DEFAULT_WRITERS,
        backoff: RateLimiter | None = None,
        listener: WriteListener | None = None,
    ) -> None:
        """Raises ValueError for a rate or burst that is not positive, or writers < 1."""
        if writers < 1:
            raise ValueError(f"status writers: must be >= 1, got {writers}")
        self._api = api
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._bucket = TokenBucket(rate, burst, now=self._clock.now())
        self._queue = WorkQueue(
            self._clock,
            debounce=0.0,
            limiter=backoff if backoff is not None else ExponentialBackoff(),
        )
        self._writers = writers
        self._listener = listener
        # ns/name -> fields recorded and not yet handed to a write. Invariant: a
        # key here is in the queue (ready or waiting out its backoff) or in
        # _writing, whose worker requeues it when its write ends.
        self._pending: dict[str, dict[str, str]] = {}
        # ns/name -> the container its pending write is conditional on (see
        # `set`); no entry: unconditional.
        self._conditions: dict[str, str] = {}
        # Keys a worker has taken from the queue and not yet finished.
        self._writing: set[str] = set()
        # ns/name -> futures of `written` callers, resolved once the key is in
        # neither _pending nor _writing (or the writer closes).
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        # Set iff _pending and _writing are both empty, or the writer is closed.
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        # Why the last failed write was refused for want of a permission or of
        # valid credentials (401/403, described), "" once any write lands: a
        # configuration fault that retries cannot fix, so readiness reports it.
        self.denied = ""

    def start(self) -> None:
        """Start the workers on the running loop; a second call is a no-op."""
        if self._tasks or self._closed:
            return
        self._tasks = [
            asyncio.create_task(self._work(), name=f"status-writer-{i}")
            for i in range(self._writers)
        ]

    def set(self, key: str, if_container: str | None = None, **fields: str) -> None:
        """Record status fields for the Topology `key` ("namespace/name").

        With `if_container`, the write lands only while the status names that
        container (see the module doc); a later set that names a container_id
        replaces the condition, other sets join it.
        An empty string is written as an empty string (meshnet's "no error").
        Raises ValueError for a key without a namespace and a name, a field this
        daemon does not own, or a value that is not a string. A no-op after close().
        """
        if self._closed:
            return
        namespace, _, name = key.partition("/")
        if not namespace or not name:
            raise ValueError(f"status of topology {key!r}: key must be 'namespace/name'")
        for field, value in fields.items():
            if field not in STATUS_FIELDS:
                raise ValueError(
                    f"status of topology {key}: {field}: not a status field meshwire writes "
                    f"(one of {', '.join(sorted(STATUS_FIELDS))})"
                )
            if not isinstance(value, str):
                raise ValueError(
                    f"status of topology {key}: {field}: expected a string, got {value!r}"
                )
        if not fields:
            return
        if key not in self._pending and key not in self._writing:
            self._queue.add(key)
        self._pending.setdefault(key, {}).update(fields)
        if if_container is not None:
            self._conditions[key] = if_container
        elif "container_id" in fields:
            self._conditions.pop(key, None)
        self._idle.clear()

    async def flush(self) -> None:
        """Wait until every field recorded so far is written or dropped (404).

        Retries are waited for, backoff included: bound it with a timeout when
        the API may be down. Returns at once after close().
        """
        await self._idle.wait()

    async def written(self, key: str) -> None:
        """Wait until every field recorded for `key` so far is written, or dropped (the
        object is gone, or the write's condition no longer holds).

        Fields set meanwhile are waited for too, and failed writes are retried
        with backoff: bound it with a timeout. Returns at once after close().
        """
        while not self._closed and (key in self._pending or key in self._writing):
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.setdefault(key, []).append(done)
            await done

    async def close(self) -> None:
        """Stop the workers, cancelling a write in flight; unwritten fields are abandoned."""
        self._closed = True
        self._queue.shutdown()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self._pending.clear()
        self._conditions.clear()
        self._writing.clear()
        for key in list(self._waiters):
            self._wake(key)
        self._idle.set()

    @property
    def pending(self) -> int:
        """Topologies with fields waiting to be written, for metrics."""
        return len(self._pending)

    async def _work(self) -> None:
        while (key := await self._queue.get()) is not None:
            self._writing.add(key)
            try:
                await self._write(key)
            finally:
                self._writing.discard(key)
                self._queue.done(key)
                if key not in self._pending:
                    self._wake(key)
                if not self._pending and not self._writing:
                    self._idle.set()

    def _wake(self, key: str) -> None:
        for done in self._waiters.pop(key, []):
            if not done.done():
                done.set_result(None)

    async def _write(self, key: str) -> None:
        """One write for `key`; afterwards the key is requeued if it has fields pending."""
        wait = self._bucket.reserve(self._clock.now())
        if wait > 0:
            await self._clock.sleep(wait)
        fields = self._pending.pop(key)
        condition = self._conditions.pop(key, None)
        namespace, _, name = key.partition("/")
        try:
            resource_version = await self._api.patch_status(namespace, name, fields, condition)
        except StatusNotFound:
            log.info("status of topology %s not written: the object no longer exists", key)
            self._queue.forget(key)
            if self._listener is not None:
                self._listener.status_dropped(key, fields)
        except StatusInvalid as why:
            log.warning(
                "status of topology %s: the API server rejects %s as invalid, dropped and not "
                "retried (the cluster's Topology CRD is stricter than meshnet's; "
                "deploy/crd.yaml accepts every status meshwire writes): %s",
                key,
                sorted(fields),
                why,
            )
            self._queue.forget(key)
        except StatusSuperseded as why:
            log.info("status of topology %s: write %s dropped: %s", key, sorted(fields), why)
            self._queue.forget(key)
            if self._listener is not None:
                self._listener.status_dropped(key, fields, why.read)
        except asyncio.CancelledError:
            self._restore(key, fields, condition)
            raise
        except Exception as err:
            self._restore(key, fields, condition)
            if isinstance(err, ApiException) and err.status in (401, 403):
                self.denied = describe(err)
            log.warning(
                "status of topology %s: write %s failed (retry %d): %s",
                key,
                sorted(fields),
                self._queue.num_requeues(key) + 1,
                describe(err),
            )
            self._queue.add_rate_limited(key)
            return
        else:
            self.denied = ""
            self._queue.forget(key)
            if self._listener is not None:
                self._listener.status_landed(key, fields, resource_version)
        if key in self._pending:
            self._queue.add(key)

    def _restore(self, key: str, fields: dict[str, str], condition: str | None) -> None:
        """Put unwritten fields back under any recorded since (the newer value wins),
        and their condition unless a set since replaced it."""
        newer = self._pending.get(key, {})
        if condition is not None and "container_id" not in newer:
            self._conditions.setdefault(key, condition)
        self._pending[key] = {**fields, **newer}
