"""grpc: the peer pod runs on another node; a persistent TAP in the local pod netns.

The TAP `local.intf` in `local.netns` carries the row's address and MTU, is up
and marked. Its frames go through the dataplane workers, not the kernel: the
driver hands one fd on the TAP to the wire manager (`WireEnds`), which passes
it to the owning worker and joins the wire to the far end asynchronously; the
TAP's carrier is up only while the far end is ready, so the pod sees a link
without carrier, never one that silently drops.

A new TAP is created in the pod netns under the row's temporary name (by a
thread that entered it), marked and renamed, like every kind (lifecycle.py). The TAP is
persistent: it outlives the daemon and its fds, keeps the pod's addresses and
routes, and a restarted daemon attaches to it again by name, so nothing in the
pod changes across a restart. Another process holding the TAP (an old worker
still exiting) makes attaching fail with EBUSY, retried as a `LinkError`.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from typing import Any

from meshwire.control.common.config import Config, default
from meshwire.control.links import iface
from meshwire.control.links.errors import LinkError, blame
from meshwire.control.links.lifecycle import Placement, claim, create_and_place, delete_end
from meshwire.control.links.names import Mark, Role, temp_name
from meshwire.control.links.netns import Netns, netlink, open_netns
from meshwire.control.tables.links import LinkRow
from meshwire.control.wire.types import TapRef, WireEnds
from meshwire.dataplane.tap import TapSpec, open_tap_in

# IFLA_INFO_KIND of TUN and TAP devices.
KIND = "tun"


class GrpcDriver:
    def __init__(self, wires: WireEnds, offloads: bool = True) -> None:
        """`offloads`: open TAPs with the virtio-net header (config `dataplane.offloads`)."""
        self._wires = wires
        self._offloads = offloads

    def update(self, row: LinkRow) -> None:
        mark = Mark(row.namespace, row.uid)
        end = row.local
        iface.check(mark.link, end.netns, end.intf, end.ip, row.mtu, end.mac)
        with ExitStack() as stack, blame(mark.link, end.netns, end.intf):
            ns = stack.enter_context(open_netns(end.netns))
            ipr = stack.enter_context(netlink(ns))
            found = claim(mark, ipr, end.netns, end.intf)
            fd = None
            if found is None or found.kind != KIND:
                if found is not None:
                    iface.delete(ipr, found.index)
                fd, found = self._create(row, mark, ns, ipr)
            tap = TapRef(ns.identity, found.index)
            if fd is None and self._wires.held(row.key) != tap:
                fd = self._attach(row, mark, ipr, found)
            try:
                iface.converge(ipr, found, mark, row.mtu, end.ip)
            except BaseException:
                if fd is not None:
                    os.close(fd)
                raise
            self._wires.attach(row, tap, fd)

    def delete(self, row: LinkRow) -> None:
        """Stop the wire and remove the TAP if it is this link's; a gone netns or TAP is success."""
        self._wires.detach(row.key)
        self.vacate(row)

    def vacate(self, row: LinkRow) -> None:
        """Remove the TAP if it is this link's and keep the wire: the row's TAP
        moved (a pod's new sandbox has a new netns path), the far end did not,
        so `update` hands the wire the new TAP's fd and the peer is not asked again."""
        mark = Mark(row.namespace, row.uid)
        with blame(mark.link, row.local.netns, row.local.intf):
            temp = temp_name(row.key, Role.TAP)
            delete_end(row.local.netns, row.local.intf, KIND, mark, temp)

    def _spec(self, row: LinkRow, name: str) -> TapSpec:
        return TapSpec(name, row.mtu or default(Config, "mtu"), self._offloads)

    def _create(self, row: LinkRow, mark: Mark, ns: Netns, ipr: Any) -> tuple[int, iface.Iface]:
        """A new marked TAP in `ns` (`ipr` talks to it) as `local.intf`: its fd, and it."""
        temp = temp_name(row.key, Role.TAP)
        fds: list[int] = []

        def create() -> None:
            fds.append(open_tap_in(row.local.netns, self._spec(row, temp)))

        try:
            (made,) = create_and_place(
                mark, create, [Placement(temp, ns, ipr, row.local.intf, row.local.mac)]
            )
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return fds[0], made

    def _attach(self, row: LinkRow, mark: Mark, ipr: Any, found: iface.Iface) -> int:
        """An fd on the existing TAP `found`, after checking the name still means it.

        Attaching by name creates a TAP if the name vanished meanwhile; such an
        unmarked newcomer is deleted again and the attempt retried.
        """
        end = row.local
        fd = open_tap_in(end.netns, self._spec(row, end.intf))
        now = iface.find(ipr, end.intf)
        if now is not None and now.index == found.index:
            return fd
        os.close(fd)
        if now is not None and now.mark is None and now.kind == KIND:
            iface.delete(ipr, now.index)
        raise LinkError(mark.link, end.netns, end.intf, "TAP vanished while attaching to it")
