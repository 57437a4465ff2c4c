"""`--serve HOST:PORT`: the live page, every asset from this process.

A loop takes a snapshot of the source every `INTERVAL` s (on a thread: it
blocks), keeps the last two for rates, and draws the SVG again only when the
lab's shape changed (Graphviz, on a thread too). The page (`static/`) polls
`/state.json` every second and updates colours, rates and errors in place;
it fetches `/graph.svg` again only when the revision changes. A snapshot that
fails keeps the last good one and shows the failure on the page (`problem`).

Routes: `/` the page, `/graph.js` and `/graph.css` its code and style,
`/graph.svg` the current drawing, `/state.json` the current state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from meshwire.base import hostport
from meshwire.tools.graph.layout import svg
from meshwire.tools.graph.live import page_state
from meshwire.tools.graph.model import Graph
from meshwire.tools.graph.sources import Source

INTERVAL = 1.0
STATIC = Path(__file__).parent / "static"
ASSETS = {
    "/": ("index.html", "text/html"),
    "/graph.js": ("graph.js", "application/javascript"),
    "/graph.css": ("graph.css", "text/css"),
}
log = logging.getLogger(__name__)


class LivePage:
    def __init__(self, source: Source) -> None:
        self.source = source
        self.graph: Graph | None = None
        self.taken = 0.0
        self.revision = 0
        self.svg = ""
        self.state: dict[str, Any] = {}
        self.problem = ""

    async def refresh(self) -> None:
        """One snapshot: the state, and the drawing if the shape changed."""
        try:
            graph = await asyncio.to_thread(self.source.snapshot)
        except Exception as exc:
            self.problem = f"snapshot failed: {exc}"
            self.state = {**self.state, "problem": self.problem}
            return
        now = time.monotonic()
        if self.graph is None or graph.shape() != self.graph.shape():
            self.svg = await asyncio.to_thread(svg, graph)
            self.revision += 1
        self.state = page_state(graph, self.revision, now, self.graph, self.taken)
        self.state["problem"] = ""
        self.graph, self.taken = graph, now

    async def run(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(INTERVAL)

    def app(self) -> web.Application:
        app = web.Application()
        for route, (name, content_type) in ASSETS.items():
            app.router.add_get(route, _asset(name, content_type))
        app.router.add_get("/graph.svg", self._svg)
        app.router.add_get("/state.json", self._state)
        return app

    async def _svg(self, _: web.Request) -> web.Response:
        return web.Response(
            text=self.svg, content_type="image/svg+xml", headers={"Cache-Control": "no-store"}
        )

    async def _state(self, _: web.Request) -> web.Response:
        return web.json_response(self.state, headers={"Cache-Control": "no-store"})


def _asset(name: str, content_type: str) -> Any:
    body = (STATIC / name).read_bytes()

    async def handler(_: web.Request) -> web.Response:
        return web.Response(body=body, content_type=content_type)

    return handler


async def serve(source: Source, listen: str, ready: Any = print) -> None:
    """Serve until cancelled; `ready(url)` once the first drawing is there and the port open."""
    page = LivePage(source)
    await page.refresh()
    host, port = hostport.split(listen)
    runner = web.AppRunner(page.app(), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host or None, port)
        await site.start()
        # The port the kernel chose when `listen` asked for port 0.
        bound = runner.addresses[0][1] if runner.addresses else port
        ready(f"http://{hostport.join(host or '127.0.0.1', bound)}/")
        loop = asyncio.create_task(page.run())
        try:
            await asyncio.Event().wait()
        finally:
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop
    finally:
        await runner.cleanup()
