"""Watch streams: the event codec, the fan-out of store events, and one stream's loop.

The wire format is kube-apiserver's: one JSON object per line,
`{"type": "ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK"|"ERROR", "object": ...}`.
A BOOKMARK object carries only `metadata.resourceVersion`; an ERROR object is a
`Status` (410 `Expired` for a resourceVersion older than the compacted history,
sent after the 200 response has started, exactly as kube-apiserver does).

Ordering contract: a stream sends every event after its starting
resourceVersion exactly once, in resourceVersion order, and a bookmark's
resourceVersion is never ahead of an event still to be sent. This holds because
a stream subscribes and reads its backlog in the same synchronous step (no
await between them) and the store publishes each event synchronously after its
commit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from meshwire.control.model.topology import API_VERSION, KIND
from meshwire.tools.api import errors, jsonio
from meshwire.tools.api.store import ADDED, Event, Store

BOOKMARK = "BOOKMARK"
ERROR = "ERROR"


def encode(type_: str, obj: dict[str, Any]) -> bytes:
    return jsonio.dumps_bytes({"type": type_, "object": obj}) + b"\n"


def encode_bookmark(rv: int) -> bytes:
    return encode(
        BOOKMARK,
        {"kind": KIND, "apiVersion": API_VERSION, "metadata": {"resourceVersion": str(rv)}},
    )


def encode_error(error: errors.ApiError) -> bytes:
    return encode(ERROR, error.status())


class _Close:
    """The queue item that ends a stream."""


class _Wake:
    """The queue item that makes a waiting stream look at its state again."""


_CLOSE = _Close()
_WAKE = _Wake()


class Subscription:
    """The live events of one namespace (None: all) for one stream, queued unbounded."""

    def __init__(self, namespace: str | None) -> None:
        self.namespace = namespace
        self._queue: asyncio.Queue[Event | _Close | _Wake] = asyncio.Queue()

    def offer(self, event: Event) -> None:
        if self.namespace is None or event.obj["metadata"]["namespace"] == self.namespace:
            self._queue.put_nowait(event)

    def close(self) -> None:
        self._queue.put_nowait(_CLOSE)

    def wake(self) -> None:
        self._queue.put_nowait(_WAKE)

    @property
    def idle(self) -> bool:
        return self._queue.empty()

    async def next(self, within: float | None) -> Event | None:
        """The next event; None on a wake or when `within` seconds pass first.

        Raises EOFError once closed.
        """
        try:
            item = await asyncio.wait_for(self._queue.get(), within)
        except TimeoutError:
            return None
        if isinstance(item, _Close):
            raise EOFError
        if isinstance(item, _Wake):
            return None
        return item


class Broadcaster:
    """Hands every store event to every open subscription."""

    def __init__(self) -> None:
        self._subscriptions: set[Subscription] = set()

    def __len__(self) -> int:
        return len(self._subscriptions)

    def publish(self, event: Event) -> None:
        for subscription in self._subscriptions:
            subscription.offer(event)

    def subscribe(self, namespace: str | None) -> Subscription:
        subscription = Subscription(namespace)
        self._subscriptions.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscriptions.discard(subscription)

    def close_all(self) -> None:
        """Ends every open stream; clients see the response end and watch again."""
        for subscription in self._subscriptions:
            subscription.close()

    def wake_all(self) -> None:
        for subscription in self._subscriptions:
            subscription.wake()


@dataclass(frozen=True, slots=True)
class WatchRequest:
    namespace: str | None
    resource_version: str
    bookmarks: bool
    timeout: float | None


def backlog(store: Store, request: WatchRequest) -> list[Event]:
    """The events a new stream sends before live ones; raises Expired (410).

    resourceVersion "" or "0" starts now with a synthetic ADDED per current
    object (kube-apiserver serves both from its cache the same way); an integer
    starts right after it.
    """
    if request.resource_version in ("", "0"):
        page = store.list_page(request.namespace)
        return [Event(ADDED, int(obj["metadata"]["resourceVersion"]), obj) for obj in page.items]
    events = store.events_after(int(request.resource_version))
    return [e for e in events if request.namespace in (None, e.obj["metadata"]["namespace"])]


Write = Callable[[bytes], Any]


async def stream(
    store: Store,
    broadcaster: Broadcaster,
    request: WatchRequest,
    write: Write,
    *,
    bookmark_interval: float,
    hung: Callable[[], bool],
) -> None:
    """Writes one watch stream until its timeout, a close, or the client leaving.

    While `hung()` is true the stream writes nothing and ignores its timeout, as
    a half-open connection would; it ends only when closed.
    """
    # No await between subscribing and reading the backlog: see the module docstring.
    subscription = broadcaster.subscribe(request.namespace)
    try:
        await _run(store, subscription, request, write, bookmark_interval, hung)
    finally:
        broadcaster.unsubscribe(subscription)


async def respond(
    http: web.Request,
    store: Store,
    broadcaster: Broadcaster,
    request: WatchRequest,
    *,
    bookmark_interval: float,
    hung: Callable[[], bool],
) -> web.StreamResponse:
    """The HTTP answer to a watch: a chunked JSON stream of `stream`'s events, ended
    cleanly at its timeout or close; a client that left just ends it."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    await response.prepare(http)
    try:
        await stream(
            store,
            broadcaster,
            request,
            response.write,
            bookmark_interval=bookmark_interval,
            hung=hung,
        )
    except ConnectionResetError:
        return response
    await response.write_eof()
    return response


async def _run(
    store: Store,
    subscription: Subscription,
    request: WatchRequest,
    write: Write,
    bookmark_interval: float,
    hung: Callable[[], bool],
) -> None:
    loop = asyncio.get_running_loop()
    try:
        events = backlog(store, request)
    except errors.Expired as e:
        await write(encode_error(e))
        return
    deadline = None if request.timeout is None else loop.time() + request.timeout
    next_bookmark = loop.time() + bookmark_interval
    pending = list(events)
    try:
        while True:
            if hung():
                while True:
                    await subscription.next(None)
            for event in pending:
                await write(encode(event.type, event.obj))
            pending.clear()
            now = loop.time()
            if deadline is not None and now >= deadline:
                return
            if request.bookmarks and now >= next_bookmark:
                if subscription.idle:
                    await write(encode_bookmark(store.resource_version))
                next_bookmark = now + bookmark_interval
            waits = [deadline - now] if deadline is not None else []
            if request.bookmarks:
                waits.append(next_bookmark - now)
            live = await subscription.next(min(waits) if waits else None)
            if live is not None:
                pending.append(live)
    except EOFError:
        return
