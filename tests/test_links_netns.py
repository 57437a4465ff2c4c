"""The netns helper: into a namespace by path, without forking or creating one."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import uvloop
from links_helpers import Namespaces, ip, namespaces, needs_root, netns_name, veth_across

from meshwire.base.netns_thread import SocketMaker, call_in_netns
from meshwire.control.links import iface
from meshwire.control.links import netns as links_netns
from meshwire.control.links.netns import (
    POOL,
    NetnsGone,
    NotANetns,
    SocketPool,
    netlink,
    open_netns,
)

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
        # The pool's kept sockets (this test's, and earlier tests' its sweeper may
        # close at any moment) are closed before each count: what remains is a leak.
        first = names()
        POOL.close_idle()
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(20):
            names()
        POOL.close_idle()
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


SO_NETNS_COOKIE = 71  # the netns a socket lives in, as a number (Linux 5.14+)


def cookie(sock: socket.socket) -> int:
    value: int = struct.unpack("=Q", sock.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8))[0]
    return value


def netns_cookie(path: str) -> int:
    with call_in_netns(path, lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)) as sock:
        return cookie(sock)


def test_the_socket_maker_makes_each_socket_in_the_netns_asked_from_many_threads(
    namespaces: Namespaces,
) -> None:
    paths = [namespaces.add("a"), namespaces.add("b")]
    expected = {path: netns_cookie(path) for path in paths}
    assert len(set(expected.values())) == 2
    maker = SocketMaker()
    home = os.stat("/proc/thread-self/ns/net").st_ino

    def make(index: int) -> list[tuple[str, int]]:
        out = []
        for turn in range(40):
            path = paths[(index + turn) % 2]
            with open_netns(path) as ns:
                kind = socket.SOCK_DGRAM if turn % 3 else socket.SOCK_RAW
                family = socket.AF_NETLINK if turn % 3 else socket.AF_PACKET
                proto = socket.NETLINK_ROUTE if turn % 3 else 0
                with maker.socket(ns.fd, family, kind, proto, path) as sock:
                    out.append((path, cookie(sock)))
        return out

    with ThreadPoolExecutor(4) as pool:
        made = [pair for chunk in pool.map(make, range(4)) for pair in chunk]
    assert len(made) == 160
    assert all(got == expected[path] for path, got in made)
    # Whoever asked stays home.
    assert os.stat("/proc/thread-self/ns/net").st_ino == home


def test_the_socket_maker_keeps_no_namespace_alive_and_survives_a_bad_request(
    namespaces: Namespaces,
) -> None:
    # A thread in a netns holds it: were the maker to stay in the last netns it
    # entered, a deleted pod netns would live on, and its veth ends with it.
    gone, stays = namespaces.add("gone"), namespaces.add("stays")
    veth_across(gone, "v0", stays, "v1")
    maker = SocketMaker()
    with pytest.raises(FileNotFoundError):
        maker.socket("/var/run/netns/mwt-never-there", socket.AF_UNIX, socket.SOCK_DGRAM)
    with open_netns(gone) as ns:
        maker.socket(ns.fd, socket.AF_UNIX, socket.SOCK_DGRAM, 0, gone).close()
    ip("netns", "del", netns_name(gone))

    deadline = time.monotonic() + 30
    while "v1" in ip("-n", netns_name(stays), "-o", "link", "show"):
        assert time.monotonic() < deadline, "the deleted netns is still alive"
        time.sleep(0.05)
    with open_netns(stays) as ns:
        maker.socket(ns.fd, socket.AF_UNIX, socket.SOCK_DGRAM, 0, stays).close()


def test_a_netlink_hands_pyroute2s_api_through_and_nothing_private(
    namespaces: Namespaces,
) -> None:
    pod = namespaces.add("p")
    with open_netns(pod) as ns, netlink(ns) as ipr:
        assert [msg.get_attr("IFLA_IFNAME") for msg in ipr.get_links()] == ["lo"]
        with pytest.raises(AttributeError):
            _ = ipr._no_such_thing


def test_a_connection_is_kept_and_lent_again_only_for_its_own_netns(
    namespaces: Namespaces,
) -> None:
    a, b = namespaces.add("a"), namespaces.add("b")
    with open_netns(a) as ns, netlink(ns) as first:
        pass
    with open_netns(a) as ns, netlink(ns) as again, open_netns(b) as other_ns:
        with netlink(other_ns) as other:
            assert other is not again
        assert again is first
        # Two callers at once get two connections.
        with netlink(ns) as beside:
            assert beside is not again


def test_a_kept_connection_makes_its_pyroute2_part_through_the_netns_opened_now(
    namespaces: Namespaces,
) -> None:
    pod = namespaces.add("p")
    ip("-n", netns_name(pod), "link", "add", "br-kept", "type", "bridge")
    for _ in range(2):  # the second time through a connection the pool kept
        with open_netns(pod) as ns, netlink(ns) as ipr:
            assert "br-kept" in [found.name for found in iface.dump(ipr)]


def test_a_connection_whose_request_was_cut_short_is_not_kept(namespaces: Namespaces) -> None:
    pod = namespaces.add("p")
    with open_netns(pod) as ns, netlink(ns) as first:
        first.rtnl.answered = False  # as if an exception came between send and answer
    with open_netns(pod) as ns, netlink(ns) as second:
        assert second is not first
        assert iface.find(second, "lo") is not None


def test_a_kept_connection_holds_its_netns_until_the_pool_closes_it(
    namespaces: Namespaces, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pool whose sweeper waits longer than any test: only close_idle closes.
    pool = SocketPool(idle=3600)
    monkeypatch.setattr(links_netns, "POOL", pool)
    a, b = namespaces.add("a"), namespaces.add("b")
    veth_across(a, "v-kept", b, "v-far")
    with open_netns(b) as ns, netlink(ns) as ipr:
        assert iface.find(ipr, "v-far") is not None
    assert pool.kept() == 1
    ip("netns", "del", netns_name(b))
    # Still held: the veth's far end lives on, so the near one does too.
    with open_netns(a) as ns, netlink(ns) as ipr:
        assert iface.find(ipr, "v-kept") is not None
    pool.close_idle()
    deadline = time.monotonic() + 30
    while True:
        with open_netns(a) as ns, netlink(ns) as ipr:
            if iface.find(ipr, "v-kept") is None:
                break
        assert time.monotonic() < deadline, "the netns outlived the pool's connection"
        time.sleep(0.05)
