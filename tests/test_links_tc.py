"""Stitching two interfaces with tc (clsact, u32 match-all, mirred redirect) in a real netns."""

from __future__ import annotations

import pytest
from links_helpers import (
    Namespaces,
    ip,
    links,
    namespaces,
    needs_root,
    netns_name,
    pings,
    veth_across,
)

from meshwire.control.links import tc
from meshwire.control.links.netns import netlink, open_netns

pytestmark = [needs_root, pytest.mark.root]
__all__ = ["namespaces"]


def test_a_redirect_round_trips_through_the_codec() -> None:
    _, _, body = tc.add_redirect(7, 42)
    assert tc.parse_redirect(body) == 42
    _, _, hash_table = tc.dump_ingress(7)
    assert tc.parse_redirect(hash_table) is None


def test_two_stitched_veth_pairs_carry_frames_and_read_back(namespaces: Namespaces) -> None:
    # a (10.0.0.1) -- veth -- x1 [stitch] x2 -- veth -- b (10.0.0.2), x1/x2 in `mid`.
    a, mid, b = namespaces.add("a"), namespaces.add("mid"), namespaces.add("b")
    for pod, side, address in ((a, "x1", "10.0.0.1/30"), (b, "x2", "10.0.0.2/30")):
        veth_across(mid, side, pod, "p")
        ip("-n", netns_name(pod), "addr", "add", address, "dev", "p")
        ip("-n", netns_name(pod), "link", "set", "p", "up")
        ip("-n", netns_name(mid), "link", "set", side, "up")
    x1, x2 = (int(str(links(mid)[name]["ifindex"])) for name in ("x1", "x2"))
    with open_netns(mid) as ns, netlink(ns) as ipr:
        assert tc.redirect_of(ipr, x1) is None
        tc.stitch(ipr, x1, x2)
        tc.stitch(ipr, x2, x1)
        assert (tc.redirect_of(ipr, x1), tc.redirect_of(ipr, x2)) == (x2, x1)
        assert pings(a, "10.0.0.2")
        # Restitching elsewhere replaces the stitch; back again, frames pass again.
        tc.stitch(ipr, x1, x1)
        assert tc.redirect_of(ipr, x1) == x1
        tc.stitch(ipr, x1, x2)
        assert pings(a, "10.0.0.2")
        tc.unstitch(ipr, x1)
        tc.unstitch(ipr, x1)
        assert tc.redirect_of(ipr, x1) is None
        assert not pings(a, "10.0.0.2")
        tc.stitch(ipr, x1, x2)
        ip("-n", netns_name(mid), "link", "del", "x2")
        # A redirect to a gone interface reads as none.
        assert tc.redirect_of(ipr, x1) is None
