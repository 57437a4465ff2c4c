"""`ApiServer`: the embedded Kubernetes-style API for Topology objects, over HTTP.

It serves the subset of kube-apiserver that the official `kubernetes` client's
`CustomObjectsApi` (sync and `kubernetes.aio`) uses for
`networkop.co.uk/v1beta1` `topologies` (see `handlers`) and the daemons'
cluster-scoped `meshwire.dev/v1alpha1` `idallocations` (see `idallocations`),
plus discovery documents, from one SQLite file (see `store`; each resource has
its own tables and resourceVersion sequence). With a `token` (`meshwire api
serve --token-file`, as `meshwire lab up` starts it) every request must
present it as a bearer token, or is answered 401 and touches nothing; there
are no users or roles beyond that. Without one, nothing is authenticated: for
a server on a private loopback (tests) only.

Test knobs let a test break things the way a real API server or network does:
`drop_watches()` ends every open watch, `compact()` compacts the history to the
current resourceVersion (a later watch from an older one gets 410), `set_delay`
delays every response, `hang_watches(True)` makes every watch, open or new, go
silent like a half-open connection (no events, no bookmarks, no timeout) until
`hang_watches(False)` drops them. The methods always work in-process; the HTTP
endpoint `POST /debug/knobs` exists only with `knobs_enabled`.

Every request but `/debug/` ones is counted by client address, verb and
resource (`requests`, see `requests.py`); with `knobs_enabled`,
`GET /debug/requests` answers the counts, so a benchmark can tell what a
daemon asked of the API.

History older than one `compaction_interval` is compacted away, as
kube-apiserver compacts etcd every five minutes, so the file stays bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from meshwire.base import hostport
from meshwire.control.auth import token as tokens
from meshwire.tools.api import discovery, errors, idallocations, jsonio
from meshwire.tools.api.handlers import TopologyHandlers
from meshwire.tools.api.requests import RequestCounts
from meshwire.tools.api.store import Store
from meshwire.tools.api.watch import Broadcaster

# Compact history older than this many seconds (kube-apiserver compacts every 5 min).
DEFAULT_COMPACTION_INTERVAL = 300.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiServer:
    def __init__(
        self,
        db_path: str,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        knobs_enabled: bool = False,
        bookmark_interval: float = 1.0,
        compaction_interval: float = DEFAULT_COMPACTION_INTERVAL,
        token: str = "",
    ) -> None:
        """`token`: the bearer token every request must present (`Authorization: Bearer
        ...`); a request without it is answered 401 before any handler runs. "": none
        asked (a server on a private loopback)."""
        self.db_path = db_path
        self.token = token
        self.host = host
        self.port = port
        self.knobs_enabled = knobs_enabled
        self.bookmark_interval = bookmark_interval
        self.compaction_interval = compaction_interval
        self.delay = 0.0
        self.hung = False
        self.requests = RequestCounts()
        self._store: Store | None = None
        self._broadcaster = Broadcaster()
        self._id_store: Store | None = None
        self._id_broadcaster = Broadcaster()
        self._runner: web.AppRunner | None = None
        self._compactor: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://{hostport.join(self.host, self.port)}"

    @property
    def open_watches(self) -> int:
        return len(self._broadcaster) + len(self._id_broadcaster)

    @property
    def store(self) -> Store:
        if self._store is None:
            raise RuntimeError("ApiServer: not started")
        return self._store

    async def start(self) -> None:
        self._store = Store(self.db_path, listener=self._broadcaster.publish)
        handlers = TopologyHandlers(
            self._store,
            self._broadcaster,
            bookmark_interval=self.bookmark_interval,
            hung=lambda: self.hung,
        )
        app = web.Application(
            middlewares=[
                self._auth_middleware,
                self._count_middleware,
                self._delay_middleware,
                _status_middleware,
            ]
        )
        app.add_routes(discovery.routes())
        app.add_routes(handlers.routes())
        self._id_store = Store(
            self.db_path,
            listener=self._id_broadcaster.publish,
            table_prefix=idallocations.TABLE_PREFIX,
            resource=idallocations.RESOURCE,
        )
        app.add_routes(
            idallocations.IdAllocationHandlers(
                self._id_store, self._id_broadcaster, bookmark_interval=self.bookmark_interval
            ).routes()
        )
        if self.knobs_enabled:
            app.add_routes(
                [
                    web.post("/debug/knobs", self._knobs),
                    web.get("/debug/knobs", self._knobs),
                    web.get("/debug/requests", self._requests),
                ]
            )
        app.on_shutdown.append(self._end_watches)
        self._runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=5.0
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        if self.compaction_interval > 0:
            self._compactor = asyncio.create_task(self._compact_periodically())

    async def stop(self) -> None:
        """Ends every watch, stops serving and closes the file; safe to call twice."""
        if self._compactor is not None:
            self._compactor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._compactor
            self._compactor = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        for store in (self._store, self._id_store):
            if store is not None:
                store.close()
        self._store = self._id_store = None

    # -- test knobs -------------------------------------------------------------

    def drop_watches(self) -> None:
        self._broadcaster.close_all()
        self._id_broadcaster.close_all()

    def compact(self) -> None:
        self.store.compact(self.store.resource_version)

    def set_delay(self, seconds: float) -> None:
        self.delay = seconds

    def hang_watches(self, hang: bool) -> None:
        self.hung = hang
        if hang:
            self._broadcaster.wake_all()
        else:
            self._broadcaster.close_all()

    # -- internals ------------------------------------------------------------

    async def _end_watches(self, _: web.Application) -> None:
        # Runs once the listening socket is closed, so no new watch can start after it.
        self.drop_watches()

    async def _compact_periodically(self) -> None:
        stores = [s for s in (self._store, self._id_store) if s is not None]
        previous = [store.resource_version for store in stores]
        while True:
            await asyncio.sleep(self.compaction_interval)
            for store, rv in zip(stores, previous, strict=True):
                store.compact(rv)
            previous = [store.resource_version for store in stores]

    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.token and not tokens.presented(request.headers.get("Authorization"), self.token):
            error = errors.Unauthorized("this API asks for its token (Authorization: Bearer)")
            return jsonio.response(error.status(), status=error.code)
        return await handler(request)

    @web.middleware
    async def _count_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith("/debug/"):
            self.requests.count(request.remote or "", request.method, request.path, request.query)
        return await handler(request)

    @web.middleware
    async def _delay_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.delay > 0 and not request.path.startswith("/debug/"):
            await asyncio.sleep(self.delay)
        return await handler(request)

    async def _requests(self, _: web.Request) -> web.Response:
        """The requests answered so far (`RequestCounts.rows`), under "requests"."""
        return jsonio.response({"requests": self.requests.rows()})

    async def _knobs(self, request: web.Request) -> web.Response:
        """POST body keys, each optional: drop_watches, compact (true to act),
        delay_ms (number), hang_watches (bool). Answers the knobs' state."""
        if request.method == "POST":
            body: Any = await request.json() if request.can_read_body else {}
            if not isinstance(body, dict):
                raise errors.BadRequest("/debug/knobs: the body must be a JSON object")
            if "delay_ms" in body:
                delay = body["delay_ms"]
                if isinstance(delay, bool) or not isinstance(delay, int | float) or delay < 0:
                    raise errors.BadRequest(
                        f"/debug/knobs: delay_ms: expected ms >= 0, got {delay!r}"
                    )
                self.set_delay(delay / 1000)
            if "hang_watches" in body:
                self.hang_watches(bool(body["hang_watches"]))
            if body.get("drop_watches"):
                self.drop_watches()
            if body.get("compact"):
                self.compact()
        return jsonio.response(
            {
                "delay_ms": self.delay * 1000,
                "hang_watches": self.hung,
                "watches": self.open_watches,
                "resourceVersion": self.store.resource_version,
                "compactedThrough": self.store.floor,
            }
        )


@web.middleware
async def _status_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error leaves as a Kubernetes `Status` object."""
    try:
        return await handler(request)
    except errors.ApiError as e:
        return jsonio.response(e.status(), status=e.code)
    except web.HTTPNotFound:
        error: errors.ApiError = errors.NotFound(
            f"the server could not find the requested resource ({request.path})"
        )
    except web.HTTPMethodNotAllowed:
        error = errors.MethodNotAllowed(f"{request.method} is not supported on {request.path}")
    except web.HTTPRequestEntityTooLarge:
        error = errors.RequestEntityTooLarge(
            f"the request body is larger than the limit, {request.client_max_size} bytes"
        )
    return jsonio.response(error.status(), status=error.code)
