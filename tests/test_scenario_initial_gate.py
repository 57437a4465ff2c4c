"""A restarted daemon waits for the first attempt of every link it found before it prunes
or says it is ready (the Cilium seed: no pruning before the initial reconciliation).

The daemon comes back over a lab: two placed pods linked, and a marked interface
of a link edited out while it was away. Its informer syncs at once, but the
first attempt of the one link it found is held in the driver. Until that
attempt ends, /readyz and CNI STATUS say not ready and pruning is refused, so the
leftover stays; once it ends, the daemon prunes the leftover and is ready.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aiohttp
import pytest
import reconciler_helpers
from api_helpers import PLURAL, TOPOLOGIES, call, create, serving, sync_api, topology
from reconciler_helpers import Pause
from scenario_helpers import (
    add_foreign,
    api_serving,
    both_up,
    daemon_node,
    read_interfaces,
)

from meshwire.control.daemon.sandbox_store import Sandbox, SandboxStore
from meshwire.control.links.netns import identity_of
from meshwire.control.reconcile.prune import PruneNotReady, prune

pytestmark = pytest.mark.root

# The held call waits this long for the test at most (a bound, not a timing check).
HOLD_LIMIT = 60.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def readyz(port: int) -> tuple[int, str]:
    timeout = aiohttp.ClientTimeout(total=30)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(f"http://127.0.0.1:{port}/readyz") as response,
    ):
        return response.status, await response.text()


async def test_until_each_initial_link_was_tried_the_daemon_is_not_ready_and_prunes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reconciler_helpers, "PAUSE_LIMIT", HOLD_LIMIT)
    metrics = free_port()
    overrides = {"metrics.listen": f"127.0.0.1:{metrics}"}
    async with daemon_node(tmp_path, overrides=overrides) as node:
        r1, r2 = node.pod_netns("r1"), node.pod_netns("r2")
        add_foreign(r1, "eth9", alias="meshwire:default/9")  # link 9, edited out meanwhile
        # What the daemon finds as it comes back: r1 and r2 on this node, linked, in the
        # API and in its sandbox store (their CNI ADDs, by the daemon that was there).
        store = SandboxStore(Path(node.daemon.config.cni.state_dir))
        async with serving(node.db) as before:
            api = sync_api(before.url)
            for name, peer, netns in (("r1", "r2", r1), ("r2", "r1", r2)):
                container = f"c-{name}"
                store.save(f"default/{name}", Sandbox(container, netns, "", identity_of(netns)))
                await call(create, api, topology(name, peer))
                placed = {"src_ip": "127.0.0.1", "net_ns": netns, "container_id": container}
                status = {"status": placed}
                await call(
                    api.patch_namespaced_custom_object_status,
                    *TOPOLOGIES,
                    "default",
                    PLURAL,
                    name,
                    status,
                )
        pause = Pause()
        driver = node.daemon.reconciler.driver
        driver.update = pause.around(driver.update)  # type: ignore[method-assign]
        try:
            async with api_serving(node):
                await pause.wait_reached()  # synced; link 1's first attempt is in the driver
                assert node.daemon.links.initialized

                code, body = await readyz(metrics)
                assert (code, body.strip()) == (
                    503,
                    "not ready: initial reconciliation not complete",
                )
                status = await node.cni("STATUS", "r1")
                assert status.exit != 0
                assert "initial reconciliation not complete" in status.result["msg"]
                with pytest.raises(PruneNotReady):
                    await prune(node.daemon.reconciler, node.daemon.driver, [r1, r2])
                assert "eth9" in read_interfaces(r1)

                pause.go.set()
                await node.wait(lambda: both_up(r1, r2), "link 1 up")
                await node.wait(lambda: "eth9" not in read_interfaces(r1), "link 9's end pruned")
                # Ready once its dataplane workers have started too, which may come later
                # than the links on a loaded machine.
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 60
                while (answer := await readyz(metrics))[0] != 200:
                    assert loop.time() < deadline, answer
                    await asyncio.sleep(0.2)
        finally:
            pause.go.set()
