"""The daemon's HTTP endpoint: `/healthz`, `/readyz`, `/metrics` and `/links`
(config `metrics.listen`).

`/healthz` answers 200 while the event loop runs. `/readyz` answers 200 once
the informer has synced and the initial reconciliation is done, and 503 with
the missing condition before that. `/metrics` is Prometheus text. `/links`
is the node's link ends with their state as JSON (link_report.py);
`/links?state=error` only the failing ones, an unknown state is a 400;
`/links?counters=1` adds each end's kernel counters (link_counters.py), read
at most once per `metrics.counters_interval`.
`/placement?pod=NS/NAME` is the pod's placement as this daemon has read it
from its Topology status (`src_ip`, `net_ns`) and whether topology changes
are still waiting to be derived (`deriving`); 404 for a pod it has no
Topology of. A caller that just moved a pod learns from it when every node
has seen the move (`lab restart-pod` waits for it).

`/links` and `/placement` name the node's pods and their namespaces: they
answer a client on loopback, or one presenting the token of
`metrics.token_file` (`Authorization: Bearer ...`), and 401 anyone else,
before reading the request's query.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from meshwire.base import hostport
from meshwire.control.auth import token as tokens


def _unauthorized() -> web.Response:
    return web.Response(
        status=401,
        text="only loopback, or a client presenting metrics.token_file's token\n",
        headers={"WWW-Authenticate": "Bearer"},
    )


class HealthServer:
    def __init__(
        self,
        listen: str,
        registry: CollectorRegistry,
        not_ready: Callable[[], str],
        links: Callable[[str, bool], Awaitable[list[dict[str, Any]]]] | None = None,
        placement: Callable[[str], dict[str, Any] | None] | None = None,
        token: str = "",
    ) -> None:
        """`not_ready()` returns "" when ready, else what is still missing;
        `links(state, counters)` the `/links` entries, with kernel counters when
        `counters`, raising ValueError for a bad state; `placement(pod_key)` the
        `/placement` answer, None for a pod with no Topology; `token` what a client
        off loopback must present for those two ("": none may)."""
        host, self.port = hostport.split(listen)
        # aiohttp binds every address of both families for None (":51100").
        self.host: str | None = host or None
        self._registry = registry
        self._not_ready = not_ready
        self._links = links or _no_links
        self._placement = placement or _no_placement
        self._token = token
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/links", self._links_json)
        app.router.add_get("/placement", self._placement_json)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port).start()
        except OSError:
            await runner.cleanup()  # a start that failed may be tried again
            raise
        self._runner = runner

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        missing = self._not_ready()
        if missing:
            return web.Response(status=503, text=f"not ready: {missing}\n")
        return web.Response(text="ready\n")

    async def _metrics(self, _: web.Request) -> web.Response:
        body = generate_latest(self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _admitted(self, request: web.Request) -> bool:
        """Whether `request` may read `/links` or `/placement`."""
        return _loopback(request.remote) or tokens.presented(
            request.headers.get("Authorization"), self._token
        )

    async def _links_json(self, request: web.Request) -> web.Response:
        if not self._admitted(request):
            return _unauthorized()
        try:
            counters = request.query.get("counters", "") not in ("", "0", "false")
            entries = await self._links(request.query.get("state", ""), counters)
        except ValueError as exc:
            return web.Response(status=400, text=f"{exc}\n")
        return web.Response(
            text=json.dumps(entries, indent=1) + "\n", content_type="application/json"
        )

    async def _placement_json(self, request: web.Request) -> web.Response:
        if not self._admitted(request):
            return _unauthorized()
        pod = request.query.get("pod", "")
        if pod.count("/") != 1:
            return web.Response(status=400, text="pod: give it as NAMESPACE/NAME\n")
        answer = self._placement(pod)
        if answer is None:
            return web.Response(status=404, text=f"no Topology {pod}\n")
        return web.Response(text=json.dumps(answer) + "\n", content_type="application/json")


def _loopback(remote: str | None) -> bool:
    """Whether a peer address is on loopback (an IPv4-mapped IPv6 one included)."""
    try:
        address = ipaddress.ip_address(remote or "")
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


async def _no_links(state: str, counters: bool) -> list[dict[str, Any]]:
    return []


def _no_placement(pod: str) -> dict[str, Any] | None:
    return None
