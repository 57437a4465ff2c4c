"""The netns helper: into a namespace by path, without forking or creating one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
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
