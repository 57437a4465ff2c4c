"""Issue #3: the CNI commands through the real C shim into the daemon's handler.

tests/test_cni_*.py cover every command and error path of the shim and the
endpoint against a stand-in handler; here the handler is the daemon's own,
over the embedded API and real namespaces: what a runtime sees for a pod in
no topology, DEL twice (the far pod keeps its interface, without carrier), a
late DEL of an old sandbox, a GC after a lost DEL, CHECK, and STATUS before
and after the daemon has synced.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from api_helpers import call, create, sync_api, topology
from cni_helpers import PREV_RESULT
from scenario_helpers import (
    Interface,
    add_foreign,
    add_pair,
    api_serving,
    both_up,
    daemon_node,
    read_interfaces,
)

from meshwire.control.cni.protocol import ErrorCode

pytestmark = pytest.mark.root


def lost_carrier(ns: str, before: Interface) -> bool:
    """Whether `before` (an interface of `ns`) is still there, the same one, without carrier."""
    now = read_interfaces(ns).get(before.name)
    return now is not None and now.ifindex == before.ifindex and not now.up


async def test_status_says_not_available_until_the_daemon_has_synced(tmp_path: Path) -> None:
    async with daemon_node(tmp_path) as node:
        # No API yet: the daemon says why it is not synced.
        reason = "topologies not synced: Cannot connect to host"
        await node.wait(lambda: reason in node.daemon.not_ready(), "a failed list")
        before = await node.cni("STATUS", "r1")
        assert before.exit != 0
        assert before.result["code"] == ErrorCode.PLUGIN_NOT_AVAILABLE
        assert "not ready" in before.result["msg"]
        assert reason in before.result["msg"]

        async with api_serving(node):
            await node.wait(lambda: node.daemon.not_ready() == "", "the daemon ready")
            after = await node.cni("STATUS", "r1")
            assert (after.exit, after.stdout) == (0, b"")


async def test_add_of_a_pod_in_no_topology_passes_the_previous_result_through(
    tmp_path: Path,
) -> None:
    async with daemon_node(tmp_path) as node, api_serving(node):
        ns = node.pod_netns("web")
        done = await node.cni("ADD", "web", "c1", ns)
        assert (done.exit, done.result) == (0, PREV_RESULT)
        assert read_interfaces(ns) == {}
        assert node.daemon.topologies.keys() == []
        assert (await node.cni("CHECK", "web", "c1", ns)).exit == 0
        assert (await node.cni("DEL", "web", "c1", ns)).exit == 0


async def test_add_wires_the_pod_records_it_and_check_passes(tmp_path: Path) -> None:
    async with daemon_node(tmp_path) as node, api_serving(node) as url:
        r1, r2 = await add_pair(node, url)
        # ADD returned after r2's link was realised: both ends exist at once
        # (operstate follows a moment later).
        assert "eth1" in read_interfaces(r1) and "eth1" in read_interfaces(r2)
        await node.wait(lambda: both_up(r1, r2), "both ends up")
        status = await node.wait_status(
            url, "r2", lambda s: s.get("container_id") == "c2", "r2's placement in the API"
        )
        assert (status["src_ip"], status["net_ns"]) == ("127.0.0.1", r2)
        for pod, container, ns in (("r1", "c1", r1), ("r2", "c2", r2)):
            done = await node.cni("CHECK", pod, container, ns)
            assert (done.exit, done.stdout) == (0, b""), done.result


async def test_check_fails_naming_the_link_a_foreign_interface_blocks(tmp_path: Path) -> None:
    async with daemon_node(tmp_path) as node, api_serving(node) as url:
        api = sync_api(url)
        await call(create, api, topology("r1", "r2"))
        await call(create, api, topology("r2", "r1"))
        r1, r2 = node.pod_netns("r1"), node.pod_netns("r2")
        add_foreign(r2.rsplit("/", 1)[1], "eth1")
        assert (await node.cni("ADD", "r1", "c1", r1)).exit == 0
        # The ADD is not held up by a link that cannot be built; CHECK reports it.
        assert (await node.cni("ADD", "r2", "c2", r2)).exit == 0
        done = await node.cni("CHECK", "r2", "c2", r2)
        assert done.result["code"] == ErrorCode.INTERNAL
        assert "link default/1" in done.result["msg"]
        assert "meshwire did not create" in done.result["msg"]
        assert read_interfaces(r2)["eth1"].kind == "bridge"


async def test_del_removes_the_links_and_a_second_del_still_succeeds(tmp_path: Path) -> None:
    async with daemon_node(tmp_path) as node, api_serving(node) as url:
        r1, r2 = await add_pair(node, url)
        await node.wait(lambda: both_up(r1, r2), "both ends up")
        before = read_interfaces(r1)["eth1"]
        assert (await node.cni("DEL", "r2", "c2", r2)).exit == 0
        # r1 keeps its interface, as a port whose cable's far end went away: no carrier.
        await node.wait(lambda: lost_carrier(r1, before), "r1's eth1 without carrier")
        await node.wait(lambda: "eth1" not in read_interfaces(r2), "r2's eth1 gone")
        await node.wait_status(
            url, "r2", lambda s: not s.get("src_ip"), "r2's placement cleared in the API"
        )
        again = await node.cni("DEL", "r2", "c2", r2)
        assert (again.exit, again.stdout) == (0, b"")
        # A DEL after the netns is gone (no CNI_NETNS) succeeds too.
        assert (await node.cni("DEL", "r2", "c2")).exit == 0


async def test_a_late_del_of_the_old_sandbox_is_ignored(tmp_path: Path) -> None:
    async with daemon_node(tmp_path) as node, api_serving(node) as url:
        r1, _ = await add_pair(node, url)
        # r2 restarts: the new sandbox c3 is ADDed before the runtime DELs the old c2.
        new = node.pod_netns("r2")
        assert (await node.cni("ADD", "r2", "c3", new)).exit == 0
        assert "eth1" in read_interfaces(new)
        assert (await node.cni("DEL", "r2", "c2")).exit == 0
        await node.wait(lambda: both_up(r1, new), "the new sandbox's link up")
        assert read_interfaces(new)["eth1"].alias == "meshwire:default/1"
        status = await node.wait_status(
            url, "r2", lambda s: s.get("container_id") == "c3", "r2's new sandbox in the API"
        )
        assert (status["src_ip"], status["net_ns"]) == ("127.0.0.1", new)
        known = node.daemon.topologies.get("default/r2")
        assert known is not None and known.status.container_id == "c3"


async def test_gc_tears_down_the_links_of_a_sandbox_whose_del_was_lost(tmp_path: Path) -> None:
    async with daemon_node(tmp_path) as node, api_serving(node) as url:
        r1, r2 = await add_pair(node, url)
        # The runtime gave up on r2's DEL; its GC vouches for r1's sandbox only.
        await node.wait(lambda: both_up(r1, r2), "both ends up")
        before = read_interfaces(r1)["eth1"]
        done = await node.gc("c1")
        assert (done.exit, done.stdout) == (0, b""), done.result
        await node.wait(lambda: lost_carrier(r1, before), "r1's eth1 without carrier")
        await node.wait(lambda: "eth1" not in read_interfaces(r2), "r2's eth1 gone")
        await node.wait_status(
            url, "r2", lambda s: not s.get("src_ip"), "r2's placement cleared in the API"
        )
        # A GC vouching for both keeps what is left.
        assert (await node.gc("c1", "c2")).exit == 0
        status = await node.wait_status(url, "r1", lambda s: bool(s), "r1's status")
        assert status["container_id"] == "c1"
