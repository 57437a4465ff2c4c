"""After the wire stack closed, a TAP the driver hands over late starts nothing.

On shutdown the daemon closes its wire manager while a grpc link's driver call
may still be in flight in a netlink thread (the Cilium seed's "no action after
close"). When that call hands its TAP over, the manager refuses it as a
`LinkError`: the fd is closed rather than leaked, no worker is told, and no
handshake is queued. The TAP itself stays in the pod (it is persistent).
"""

from __future__ import annotations

import pytest
from wire_helpers import grpc_row, is_open, wire_nodes

from meshwire.control.links.driver_errors import LinkError


async def test_a_tap_handed_over_after_close_is_refused_and_its_fd_closed() -> None:
    with wire_nodes("a", "b") as (_, (a, b)):
        row = grpc_row(1, "r1", "r2", b.ip)
        a.manager.close()

        tap, fd = a.tap("r1")
        with pytest.raises(LinkError, match="closed"):
            a.manager.attach(row, tap, fd)

        assert not is_open(fd)
        assert a.pool.commands == 0
        assert len(a.manager) == 0
        assert a.manager.nodes.depth == 0
