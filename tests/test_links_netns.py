"""The netns helper: into a namespace by path, without forking or creating one."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import uvloop
from links_helpers import Namespaces, ip, namespaces, needs_root, netns_name

from meshwire.control.links import iface
from meshwire.control.links.netns import NetnsGone, NotANetns, netlink, open_netns

pytestmark = [needs_root, pytest.mark.root]
__all__ = ["namespaces"]


def test_netlink_talks_inside_the_netns_and_the_caller_stays_home(
    namespaces: Namespaces,
) -> None:
    pod = namespaces.add("p")
    ip("-n", netns_name(pod), "link", "add", "only-here", "type", "bridge")
    home = os.stat("/proc/thread-self/ns/net").st_ino
    with open_netns(pod) as ns, netlink(ns) as ipr:
        assert iface.find(ipr, "only-here") is not None
    assert os.stat("/proc/thread-self/ns/net").st_ino == home
    with netlink() as ipr:
        assert iface.find(ipr, "only-here") is None


def test_a_missing_netns_is_named_and_never_created(namespaces: Namespaces) -> None:
    path = f"/var/run/netns/{namespaces.prefix}-missing"
    with pytest.raises(NetnsGone, match=path), open_netns(path):
        pass
    assert not os.path.exists(path)


def test_a_path_that_is_not_a_netns_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("")
    for path in (str(plain), str(tmp_path), "/proc/self/ns/mnt"):
        with pytest.raises(NotANetns, match=path), open_netns(path):
            pass


def test_works_under_uvloop_and_leaks_no_descriptors(namespaces: Namespaces) -> None:
    # The daemon runs on uvloop, whose policy makes every new loop a uvloop one;
    # pyroute2 cannot run on that, so the helper must bring its own loop.
    pod = namespaces.add("p")

    def names() -> list[str]:
        with open_netns(pod) as ns, netlink(ns) as ipr:
            return [i.name for i in iface.dump(ipr)]

    def open_many_times() -> tuple[list[str], int, int]:
        first = names()
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(20):
            names()
        return first, before, len(os.listdir("/proc/self/fd"))

    policy = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        with asyncio.Runner() as runner:
            first, before, after = runner.run(asyncio.to_thread(open_many_times))
    finally:
        asyncio.set_event_loop_policy(policy)
    assert first == ["lo"]
    assert after == before
