"""A real browser for tests of what a person looks at: Debian's headless Chromium.

`Browser` starts `chromium --headless --no-sandbox` with a private profile and
DevTools on a port Chromium picks (read from its DevToolsActivePort file),
opens one page and drives it through the DevTools protocol over a
WebSocket: `open(url)`, `evaluate(js)` and `wait_for(js)` (bounded polling of
a JavaScript condition). The process is stopped by its PID on close.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

START_TIMEOUT = 60.0


class Browser:
    def __init__(self) -> None:
        program = shutil.which("chromium")
        assert program, "chromium is not installed (scripts/setup.sh installs it)"
        # Chromium's helper processes may still write there a moment after it exits.
        self._profile = tempfile.TemporaryDirectory(
            prefix="mwgraph-chromium-", ignore_cleanup_errors=True
        )
        self.process = subprocess.Popen(
            [
                program,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--window-size=1300,900",
                "--remote-debugging-port=0",
                f"--user-data-dir={self._profile.name}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # Its own process group: close() stops Chromium's helpers with it.
            start_new_session=True,
        )
        self._loop = asyncio.new_event_loop()
        self._ids = 0
        try:
            self._ws_url = self._page_url(self._port())
            self._session, self._ws = self._loop.run_until_complete(self._connect())
        except BaseException:
            self.close()
            raise

    def _port(self) -> int:
        active = Path(self._profile.name) / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if active.exists() and active.read_text().strip():
                return int(active.read_text().split()[0])
            assert self.process.poll() is None, "chromium exited at start"
            time.sleep(0.1)
        raise AssertionError(f"chromium did not open DevTools within {START_TIMEOUT:.0f} s")

    def _page_url(self, port: int) -> str:
        async def targets() -> list[dict[str, Any]]:
            url = f"http://127.0.0.1:{port}/json/list"
            async with aiohttp.ClientSession() as session, session.get(url) as answer:
                result: list[dict[str, Any]] = await answer.json()
                return result

        pages = [t for t in self._loop.run_until_complete(targets()) if t["type"] == "page"]
        return str(pages[0]["webSocketDebuggerUrl"])

    async def _connect(self) -> tuple[aiohttp.ClientSession, aiohttp.ClientWebSocketResponse]:
        session = aiohttp.ClientSession()
        ws = await session.ws_connect(self._ws_url, max_msg_size=0)
        return session, ws

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result (events in between are skipped)."""
        self._ids += 1
        ident = self._ids

        async def exchange() -> dict[str, Any]:
            await self._ws.send_str(json.dumps({"id": ident, "method": method, "params": params}))
            while True:
                message = json.loads((await self._ws.receive(timeout=60)).data)
                if message.get("id") == ident:
                    assert "error" not in message, message["error"]
                    result: dict[str, Any] = message["result"]
                    return result

        return self._loop.run_until_complete(exchange())

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0) -> Any:
        """Poll `expression` until truthy; its value. Fails naming it after `timeout` s."""
        deadline = time.monotonic() + timeout
        # While the page swaps in a new drawing an element can be missing for a moment:
        # an expression that throws counts as not yet true.
        guarded = f"(() => {{ try {{ return ({expression}); }} catch (e) {{ return null; }} }})()"
        while True:
            value = self.evaluate(guarded)
            if value:
                return value
            assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {expression}"
            time.sleep(0.2)

    def close(self) -> None:
        if hasattr(self, "_ws"):
            self._loop.run_until_complete(self._ws.close())
            self._loop.run_until_complete(self._session.close())
        self._loop.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self._profile.cleanup()
