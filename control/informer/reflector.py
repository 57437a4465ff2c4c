"""`Reflector`: one resource listed, then watched, forever; client-go's Reflector.

The loop, the same for every resource meshwire follows (Topologies,
IdAllocations, its own Namespace):

1. List, `page_size` objects a request, and hand every item to
   `handler.listed(items)` at once: the handler makes its view equal to them.
2. Watch from the list's resourceVersion, with bookmarks and a server-side
   `timeoutSeconds` (`watch_timeout`). Each ADDED, MODIFIED or DELETED event
   goes to `handler.changed(type, object)`; a BOOKMARK only moves the
   resourceVersion. A watch the server ends normally is reopened at once from
   the last resourceVersion seen (event or bookmark).
3. A 410 Gone (an ERROR event, or the watch request's status) means that
   resourceVersion is compacted away: go back to 1. The relist's items tell the
   handler what was deleted while nobody watched.
4. Any other failure (connection refused or reset, HTTP error, a timeout, a
   line that is not JSON, an ERROR event, a watch the server ends at once with
   no event, a handler that raised) is kept in `stats.last_error`, logged, and
   waited out with the backoff; then the watch resumes from the last
   resourceVersion if there is one, else it lists. A list, or a watch the server
   accepts, marks the backoff healthy and clears `last_error`.

Every request carries a client timeout: a page gets `request_timeout`; a watch
gets `watch_timeout + request_timeout`, so a half-open connection, which would
otherwise wait forever, fails within that many seconds and is reopened from the
last resourceVersion. Both default to the `api.*` config keys.

`run()` returns when `stop()` is called (from a handler too: no event after the
call is handed over) and by cancellation, which closes the open request; it
never raises anything else. Tolerated server quirks: no resourceVersion on
objects or lists (the watch resumes from the last one known), no bookmarks, no
paging (one page with everything).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import ClientResponse
from kubernetes.aio.client.exceptions import ApiException

from meshwire.control.common.config import ApiConfig, default
from meshwire.control.common.retries import Backoff, BackoffPolicy, Now
from meshwire.control.common.waits import first
from meshwire.control.informer.failure import describe
from meshwire.control.informer.stats import InformerStats

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]

# A watch that ends this soon without a single event is a failure, not a
# normal end: a server that closes every watch at once must not be hammered.
SHORT_WATCH = 1.0
# Objects per list page: a 10,000-pod lab in 20 requests, each small enough
# that a slow API server answers well within `request_timeout`.
PAGE_SIZE = 500
# Reconnects wait 800 ms doubling to 30 s, client-go's reflector's numbers: quick
# enough that a blip costs under a second, slow enough that a thousand nodes do
# not hammer an API server that is down. A connection healthy for two minutes
# earns a fresh start, so one failure after a long quiet run waits 800 ms again.
RECONNECT = BackoffPolicy(initial=0.8, maximum=30.0, reset_after=120.0)


class Source(Protocol):
    """One resource (maybe narrowed to a namespace or a field selector) on one server."""

    @property
    def name(self) -> str:
        """What the logs call it (`topologies`, `namespace meshwire`)."""
        ...

    async def list_page(self, token: str | None, limit: int, client_timeout: float) -> Any:
        """One page of the list, as the API sent it (a dict); raises `ApiException`."""
        ...

    async def open_watch(
        self, resource_version: str, timeout_seconds: int, client_timeout: float
    ) -> ClientResponse:
        """The watch's streaming response, whatever its status; the caller closes it."""
        ...


class Handler(Protocol):
    def listed(self, items: list[Any]) -> None:
        """The resource now holds exactly `items` (each as the API sent it)."""
        ...

    def changed(self, event_type: str, obj: Any) -> None:
        """One watch event: ADDED, MODIFIED or DELETED, with its object."""
        ...


class Expired(Exception):
    """The API answered 410 Gone: the resourceVersion we hold is compacted away."""


class WatchError(Exception):
    """The watch stream said something we cannot continue from."""


class Reflector:
    def __init__(
        self,
        source: Source,
        handler: Handler,
        *,
        request_timeout: float = default(ApiConfig, "request_timeout"),
        watch_timeout: int = default(ApiConfig, "watch_timeout"),
        page_size: int = PAGE_SIZE,
        backoff: BackoffPolicy = RECONNECT,
        not_found: str = "",
        stats: InformerStats | None = None,
        clock: Now = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        """`not_found`: what a 404 means (the resource is not served), for `last_error`."""
        self.source = source
        self.handler = handler
        self.request_timeout = request_timeout
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self.not_found = not_found
        self.stats = stats or InformerStats()
        self._clock = clock
        self._sleep = sleep
        self._backoff = Backoff(backoff, clock)
        self._stopped = asyncio.Event()
        # Where the next watch starts: the last resourceVersion seen (list, event or
        # bookmark), so a watch that breaks mid-stream resumes after its last event,
        # not where it began. None: list first.
        self._resume: str | None = None

    async def run(self) -> None:
        """List and watch until `stop()` or cancelled; never raises anything else."""
        await first(self._follow(), self._stopped.wait(), within=None)

    def stop(self) -> None:
        self._stopped.set()

    async def _follow(self) -> None:
        while not self._stopped.is_set():
            try:
                if self._resume is None:
                    await self._list()
                if not self._stopped.is_set():
                    await self._watch()
            except Expired:
                log.info(
                    "%s: resourceVersion %s expired (410), relisting",
                    self.source.name,
                    self._resume,
                )
                self._resume = None
            except Exception as err:
                self.stats.reconnects += 1
                delay = self._backoff.next_delay()
                self.stats.last_error = describe(err, not_found=self.not_found)
                log.warning(
                    "%s: %s from resourceVersion %s failed: %s: %s; retrying in %.1fs",
                    self.source.name,
                    "watch" if self._resume is not None else "list",
                    self._resume,
                    type(err).__name__,
                    self.stats.last_error,
                    delay,
                )
                await self._sleep(delay)

    async def _list(self) -> None:
        """Hand one full list to the handler and resume from its resourceVersion."""
        if self.stats.lists:
            self.stats.relists += 1
        items: list[Any] = []
        token: str | None = None
        while True:
            page = await self.source.list_page(token, self.page_size, self.request_timeout)
            if not isinstance(page, dict):
                raise WatchError(f"the list is not an object: {type(page).__name__}")
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                resource_version = str(meta.get("resourceVersion") or "")
                break
        self._backoff.healthy()
        self.stats.last_error = ""
        self.stats.resource_version = resource_version
        self.handler.listed(items)
        self.stats.lists += 1
        self._resume = resource_version

    async def _watch(self) -> None:
        """Follow one watch from `_resume` until the server ends it, advancing `_resume`.

        Raises `Expired` on 410, `WatchError` on another ERROR event or a stream
        that is not JSON lines, `ApiException` on a non-200 answer, and whatever
        aiohttp raises on a broken connection or the client timeout.
        """
        response = await self.source.open_watch(
            self._resume or "",
            self.watch_timeout,
            float(self.watch_timeout + self.request_timeout),
        )
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
            while not self._stopped.is_set() and (line := await response.content.readline()):
                if not line.strip():
                    continue
                self._handle(_parse_line(line))
                received += 1
        finally:
            response.close()
        if received == 0 and self._clock() - started < SHORT_WATCH:
            raise WatchError("the server ended the watch at once without any event")

    def _handle(self, event: dict[str, Any]) -> None:
        """Hand one watch event over and note its resourceVersion."""
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
            self.handler.changed(event_type, raw)
        elif event_type != "BOOKMARK":
            log.warning("%s: ignoring watch event of unknown type %r", self.source.name, event_type)
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
