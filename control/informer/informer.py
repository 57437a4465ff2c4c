"""The Topology informer: list, then watch, into a `TopologySink`, forever.

The loop (written here rather than with `kubernetes.aio.watch.Watch`, which
retries a 410 once and then raises):

1. List every topology in all namespaces, `page_size` at a time, and make the
   sink equal to the list (changed objects upserted, vanished ones deleted).
   After the first list the sink is marked initialized and `synced` is set.
2. Watch from the list's resourceVersion with bookmarks and a server-side
   `timeoutSeconds`. A watch the server ends normally is reopened at once from
   the last resourceVersion seen (event or bookmark).
3. A 410 Gone (an ERROR event, or the watch request's status) means that
   resourceVersion is compacted away: go back to 1. The relist's diff emits a
   deletion for every object deleted while we were not watching.
4. Any other failure (connection refused or reset, HTTP error, a timeout,
   a line that is not JSON) is logged and retried after a backoff, resuming
   the watch from the last resourceVersion if there is one, else listing.

Every request carries a client timeout (`_request_timeout`): a page gets
`request_timeout`; a watch gets `watch_timeout + request_timeout`, so a
half-open connection, which would otherwise wait forever, fails within that
many seconds and is reopened from the last resourceVersion.

`run()` returns only by cancellation; cancelling it closes the open request.
Tolerated server quirks: no resourceVersion on objects or lists (values are
compared instead, and the watch resumes from the last one known), no
bookmarks, no paging (one page with everything).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import ClientResponse
from kubernetes.aio.client import ApiClient, CustomObjectsApi
from kubernetes.aio.client.exceptions import ApiException

from meshwire.control.common import heap
from meshwire.control.common.config import ApiConfig, default
from meshwire.control.common.retries import Backoff, BackoffPolicy, Clock
from meshwire.control.informer.apply import Outcome, Snapshot, apply_event, apply_snapshot
from meshwire.control.informer.failure import describe
from meshwire.control.informer.sink import TopologySink
from meshwire.control.informer.stats import InformerStats
from meshwire.control.model.topology import GROUP, PLURAL, VERSION

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]

# A watch that ends this soon without a single event is a failure, not a
# normal end: a server that closes every watch at once must not be hammered.
SHORT_WATCH = 1.0
# What a 404 on the list or the watch means.
NOT_SERVED = (
    f"this API server serves no {PLURAL}.{GROUP}/{VERSION}: "
    "install the Topology CRD (deploy/crd.yaml)"
)


# Reconnects wait 800 ms doubling to 30 s, client-go's reflector's numbers: quick
# enough that a blip costs under a second, slow enough that a thousand nodes do
# not hammer an API server that is down. A connection healthy for two minutes
# earns a fresh start, so one failure after a long quiet run waits 800 ms again.
RECONNECT = BackoffPolicy(initial=0.8, maximum=30.0, reset_after=120.0)


@dataclass(frozen=True, slots=True)
class InformerOptions:
    """How the informer talks to the API; defaults mirror the `api.*` config keys."""

    # Watch this namespace only; "" watches all namespaces, as meshnet does.
    namespace: str = ""
    # Objects per list page: a 10,000-pod lab in 20 requests, each small
    # enough that a slow API server answers well within `request_timeout`.
    page_size: int = 500
    # Client timeout (s) of a list page, and the grace past `watch_timeout`
    # after which the client abandons a watch the server did not end.
    request_timeout: float = default(ApiConfig, "request_timeout")
    # Server-side timeoutSeconds of a watch. It also bounds, with
    # `request_timeout`, how long a half-open connection goes unnoticed, so the
    # client timeout of a watch (their sum) always exceeds the server's
    # timeout and its bookmark interval.
    watch_timeout: int = default(ApiConfig, "watch_timeout")
    backoff: BackoffPolicy = RECONNECT


class Expired(Exception):
    """The API answered 410 Gone: the resourceVersion we hold is compacted away."""


class WatchError(Exception):
    """The watch stream said something we cannot continue from."""


class Informer:
    """Keeps a `TopologySink` equal to the cluster's Topology objects.

    The sink sees one write per real change (see `apply.py`); deletions made
    while disconnected arrive as deletions on the next relist. `synced` is set
    once the first full list has been applied, never before.
    """

    def __init__(
        self,
        api: ApiClient,
        sink: TopologySink,
        options: InformerOptions | None = None,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._sink = sink
        self.options = options or InformerOptions()
        self._objects = CustomObjectsApi(api)
        self._clock = clock
        self._sleep = sleep
        self._backoff = Backoff(self.options.backoff, clock)
        self.stats = InformerStats()
        self.synced = asyncio.Event()
        # Where the next watch starts: the last resourceVersion applied (list,
        # event or bookmark), so a watch that breaks mid-stream resumes after
        # its last event, not where it began. None: list first.
        self._resume: str | None = None

    async def run(self) -> None:
        """List and watch until cancelled; never raises anything else."""
        while True:
            try:
                if self._resume is None:
                    await self._list()
                await self._watch()
            except Expired:
                log.info("topologies: resourceVersion %s expired (410), relisting", self._resume)
                self._resume = None
            except Exception as err:
                self.stats.reconnects += 1
                delay = self._backoff.next_delay()
                self.stats.last_error = describe(err, not_found=NOT_SERVED)
                log.warning(
                    "topologies: %s from resourceVersion %s failed: %s: %s; retrying in %.1fs",
                    "watch" if self._resume is not None else "list",
                    self._resume,
                    type(err).__name__,
                    self.stats.last_error,
                    delay,
                )
                await self._sleep(delay)

    # -- list -----------------------------------------------------------------

    async def _list(self) -> None:
        """Apply one full list to the sink and resume from its resourceVersion."""
        if self.stats.lists:
            self.stats.relists += 1
        snapshot = Snapshot()
        token: str | None = None
        while True:
            page = await self._list_page(token)
            with heap.bulk():
                for item in page.get("items") or []:
                    snapshot.add(item)
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                resource_version = str(meta.get("resourceVersion") or "")
                break
        self._backoff.healthy()
        self.stats.last_error = ""
        with heap.bulk():
            result = apply_snapshot(self._sink, snapshot)
        self.stats.lists += 1
        self.stats.unreadable += len(snapshot.unreadable)
        self.stats.changes += result.upserted + result.deleted
        self.stats.resource_version = resource_version
        log.info(
            "topologies: listed %d at resourceVersion %s (%d changed, %d deleted, %d unreadable)",
            len(snapshot.topologies),
            resource_version,
            result.upserted,
            result.deleted,
            len(snapshot.unreadable),
        )
        self._resume = resource_version
        if not self.synced.is_set():
            self._sink.mark_initialized()
            self.synced.set()

    # -- watch ----------------------------------------------------------------

    async def _watch(self) -> None:
        """Follow one watch from `_resume` until the server ends it, advancing `_resume`.

        Raises `Expired` on 410, `WatchError` on another ERROR event or a
        stream that is not JSON lines, `ApiException` on a non-200 answer, and
        whatever aiohttp raises on a broken connection or the client timeout.
        """
        response = await self._open_watch(self._resume or "")
        try:
            if response.status != 200:
                body = await response.text()
                if response.status == 410:
                    raise Expired(body)
                raise ApiException(status=response.status, reason=response.reason, body=body)
            self._backoff.healthy()
            self.stats.last_error = ""
            started = self._clock()
            received = 0
            while line := await response.content.readline():
                if not line.strip():
                    continue
                self._handle(_parse_line(line))
                received += 1
        finally:
            response.close()
        if received == 0 and self._clock() - started < SHORT_WATCH:
            raise WatchError("the server ended the watch at once without any event")

    async def _list_page(self, token: str | None) -> Any:
        """One page of the list (a dict as the API sent it); raises `ApiException`."""
        common: dict[str, Any] = {
            "limit": self.options.page_size,
            "_continue": token,
            "_request_timeout": float(self.options.request_timeout),
        }
        if self.options.namespace:
            return await self._objects.list_namespaced_custom_object(
                GROUP, VERSION, self.options.namespace, PLURAL, **common
            )
        return await self._objects.list_cluster_custom_object(GROUP, VERSION, PLURAL, **common)

    async def _open_watch(self, resource_version: str) -> ClientResponse:
        """The watch's streaming response, whatever its status; the caller closes it."""
        common: dict[str, Any] = {
            "watch": True,
            "allow_watch_bookmarks": True,
            "resource_version": resource_version or None,
            "timeout_seconds": self.options.watch_timeout,
            "_request_timeout": float(self.options.watch_timeout + self.options.request_timeout),
        }
        objects = self._objects
        if self.options.namespace:
            return await objects.list_namespaced_custom_object_without_preload_content(
                GROUP, VERSION, self.options.namespace, PLURAL, **common
            )
        return await objects.list_cluster_custom_object_without_preload_content(
            GROUP, VERSION, PLURAL, **common
        )

    def _handle(self, event: dict[str, Any]) -> None:
        """Apply one watch event and note its resourceVersion."""
        event_type = str(event.get("type"))
        raw = event.get("object")
        self.stats.events[event_type] += 1
        if event_type == "ERROR":
            status = raw if isinstance(raw, dict) else {}
            if status.get("code") == 410:
                raise Expired(status.get("message", ""))
            raise WatchError(
                f"ERROR event {status.get('code')} {status.get('reason')}: {status.get('message')}"
            )
        if event_type in ("ADDED", "MODIFIED", "DELETED"):
            outcome = apply_event(self._sink, event_type, raw)
            if outcome is Outcome.CHANGED:
                self.stats.changes += 1
            elif outcome is Outcome.UNREADABLE:
                self.stats.unreadable += 1
        elif event_type != "BOOKMARK":
            log.warning("topologies: ignoring watch event of unknown type %r", event_type)
            return
        meta = raw.get("metadata") if isinstance(raw, dict) else None
        seen = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if isinstance(seen, str) and seen:
            self._resume = seen
            self.stats.resource_version = seen


def _parse_line(line: bytes) -> dict[str, Any]:
    try:
        event = json.loads(line)
    except ValueError as err:
        raise WatchError(f"watch line is not JSON: {line[:200]!r}") from err
    if not isinstance(event, dict):
        raise WatchError(f"watch line is not an event object: {line[:200]!r}")
    return event
