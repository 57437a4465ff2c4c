"""A CNI ADD waiting for its pod's links reads the daemon's tables, never the API.

In meshnet the ADD polled the API (a Get of the peer's Topology every 100 ms per
link), a request storm when many pods start at once (KNE #743). meshwire's ADD
writes the pod's placement once and then waits on its links table, which tells
it of every health write touching the pod: it does not poll. Here an ADD waits
while its link's first build is held in the driver: it looks at its links only
when told, and the embedded API receives no request at all meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Set
from pathlib import Path
from typing import Any

import pytest
import reconciler_helpers
from aiohttp import web
from api_helpers import call, create, sync_api, topology
from reconciler_helpers import Pause
from scenario_helpers import api_serving, both_up, daemon_node

from meshwire.tools.api.server import ApiServer

pytestmark = pytest.mark.root

HOLD_LIMIT = 60.0
# How long the waiting ADD is watched, its placement already in the API: the old
# poll looked 10 to 50 times in it.
WINDOW = 0.5


async def test_an_add_waiting_for_its_links_looks_only_when_told_and_asks_the_api_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reconciler_helpers, "PAUSE_LIMIT", HOLD_LIMIT)
    requests: list[str] = []
    passed_on = ApiServer._delay_middleware

    @web.middleware
    async def counted(self: ApiServer, request: web.Request, handler: Any) -> web.StreamResponse:
        requests.append(f"{request.method} {request.path_qs}")
        return await passed_on(self, request, handler)

    monkeypatch.setattr(ApiServer, "_delay_middleware", counted)
    async with daemon_node(tmp_path) as node, api_serving(node) as url:
        api = sync_api(url)
        await call(create, api, topology("r1", "r2"))
        await call(create, api, topology("r2", "r1"))
        r1, r2 = node.pod_netns("r1"), node.pod_netns("r2")
        assert (await node.cni("ADD", "r2", "c2", r2)).exit == 0  # r1 not running: no wait

        looks = told = 0
        owes = node.daemon.desired.owes

        def counted_owes(pod: str) -> bool:  # asked once by every look of a waiting ADD
            nonlocal looks
            looks += 1
            return owes(pod)

        def tell(pods: Set[str], errors: bool) -> None:
            nonlocal told
            told += 1

        node.daemon.desired.owes = counted_owes  # type: ignore[method-assign]
        stop = node.daemon.links.watch_health(tell, "default/r1")
        pause = Pause()
        driver = node.daemon.reconciler.driver
        driver.update = pause.around(driver.update)  # type: ignore[method-assign]
        try:
            add = asyncio.create_task(node.cni("ADD", "r1", "c1", r1))
            await pause.wait_reached()  # link 1's build is held: r1's ADD waits for it
            await node.wait_status(url, "r1", lambda s: s.get("net_ns") == r1, "r1's placement")
            looks_before, told_before, requests_before = looks, told, len(requests)
            await asyncio.sleep(WINDOW)
            during = requests[requests_before:]
            # At most one look per telling, plus one for a telling just before the window
            # whose look the ADD's task ran inside it; a poll would look 10 to 50 times.
            assert looks - looks_before <= told - told_before + 1
            assert not add.done()

            pause.go.set()
            assert (await add).exit == 0
            await node.wait(lambda: both_up(r1, r2), "link 1 up")
            assert during == [], f"API requests while the ADD waited: {during}"
        finally:
            pause.go.set()
            stop()


async def test_an_add_logs_where_its_time_went(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The restart benchmark splits a pod's restart with this line: queue,
    # netlink, noticed and status, each in ms from the ADD's arrival.
    async with daemon_node(tmp_path) as node, api_serving(node) as url:
        api = sync_api(url)
        await call(create, api, topology("r1", "r2"))
        await call(create, api, topology("r2", "r1"))
        r1, r2 = node.pod_netns("r1"), node.pod_netns("r2")
        assert (await node.cni("ADD", "r2", "c2", r2)).exit == 0
        with caplog.at_level(logging.INFO, logger="meshwire.control.daemon.cni_handler"):
            assert (await node.cni("ADD", "r1", "c1", r1)).exit == 0
        await node.wait(lambda: both_up(r1, r2), "link 1 up")

    lines = [
        r.getMessage() for r in caplog.records if "CNI ADD default/r1 timings" in r.getMessage()
    ]
    assert len(lines) == 1, caplog.text
    parts = {name: float(ms) for name, ms in re.findall(r"(\w+)_ms=([0-9.]+)", lines[0])}
    assert set(parts) == {"queue", "netlink", "noticed", "status", "daemon"}
    # The link was built during this ADD: its driver pass is the netlink part.
    assert parts["netlink"] > 0
    whole = parts["queue"] + parts["netlink"] + parts["noticed"] + parts["status"]
    assert whole == pytest.approx(parts["daemon"], abs=0.05)
