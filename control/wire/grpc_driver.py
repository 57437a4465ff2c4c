"""grpc: the workers carry the link; a persistent TAP in the node's netns, behind a pod end.

The pod holds a pod end (links/podend.py), `local.intf` in `local.netns`. The
TAP, `iface_names.node_name(row key, TAP)` in the node's netns, marked, up and
without an IPv6 address of its own, is stitched to the pod end's node side
(links/tc.py). Its frames go through the dataplane workers: the driver hands
one fd on the TAP to the wire manager (`WireEnds`), which passes it to the
owning worker, joins the wire to the far end asynchronously and gives the pod
end carrier exactly while the wire is joined and its cable plugged, so the
pod sees a link without carrier, never one that silently drops.

A new TAP is created under the row's temporary name, marked and renamed, like
every kind (links/lifecycle.py). The TAP is persistent: it outlives the
daemon and its fds, and a restarted daemon attaches to it again by name. It is
named for the row, not for the pod's netns, so a pod restarted in a new netns
gets a new pod end stitched to the same TAP, and the wire goes on. Another
process holding the TAP (an old worker still exiting) makes attaching fail
with EBUSY, retried as a `LinkError`.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from contextlib import ExitStack
from typing import Any

from meshwire.control.common.config import Config, default
from meshwire.control.links import iface, podend, rtnl, tc
from meshwire.control.links.aside import Reaper
from meshwire.control.links.driver_errors import LinkError, blame
from meshwire.control.links.iface_names import Mark, NodeRole, Role, node_name, temp_name
from meshwire.control.links.lifecycle import (
    RenameTarget,
    claim,
    clear_leftovers,
    create_and_rename,
)
from meshwire.control.links.netns import CURRENT, Netns, NetnsGone, NotANetns, netlink, open_netns
from meshwire.control.links.podend import Side
from meshwire.control.tables.links import LinkRow
from meshwire.control.wire.types import TapRef, WireEnds
from meshwire.dataplane.tap import TapSpec, open_tap_in

# IFLA_INFO_KIND of TUN and TAP devices.
KIND = "tun"


class GrpcDriver:
    def __init__(
        self,
        wires: WireEnds,
        offloads: bool = True,
        host_netns: str = "",
        reaper: Reaper | None = None,
    ) -> None:
        """`offloads`: open TAPs with the virtio-net header (config `dataplane.offloads`);
        `host_netns`: the node's netns, where the TAPs and the pod ends' node sides
        are ("": the caller's); `reaper`: what deletes node sides set aside."""
        self._wires = wires
        self._offloads = offloads
        self._host = host_netns or CURRENT
        self._reaper = reaper if reaper is not None else Reaper()

    def update(self, row: LinkRow) -> None:
        mark = Mark(row.namespace, row.uid)
        end = row.local
        name = node_name(row.key, NodeRole.TAP)
        iface.check(mark.link, end.netns, end.intf, end.ip, row.mtu, end.mac)
        with ExitStack() as stack, blame(mark.link, end.netns, end.intf):
            hns = stack.enter_context(open_netns(self._host))
            node = Side(hns, stack.enter_context(netlink(hns)))
            ns = stack.enter_context(open_netns(end.netns))
            pod = Side(ns, stack.enter_context(netlink(ns)))
            pod_end = podend.ensure(mark, end, row.kind, row.mtu, pod, node, self._reaper)
            found = claim(mark, node.ipr, self._host, name)
            fd = None
            if found is None or found.kind != KIND:
                if found is not None:
                    iface.delete(node.ipr, found.index)
                fd, found = self._create(row, mark, hns, node.ipr, name)
            tap = TapRef(hns.identity, found.index)
            if fd is None and self._wires.held(row.key) != tap:
                fd = self._attach(row, mark, node.ipr, found, name)
            try:
                iface.converge(node.ipr, found, mark, row.mtu, "")
                tc.stitch(node.ipr, pod_end.node.index, found.index)
                tc.stitch(node.ipr, found.index, pod_end.node.index)
            except BaseException:
                if fd is not None:
                    os.close(fd)
                raise
            # The manager gives the pod end its carrier (the wire's).
            self._wires.attach(row, tap, fd)

    def delete(self, row: LinkRow, keep: Collection[tuple[str, str]] = ()) -> None:
        """Stop the wire and remove the TAP, and the pod end unless it is in `keep` or
        another transport holds it now; a gone netns, TAP or end is success."""
        self._wires.detach(row.key)
        mark = Mark(row.namespace, row.uid)
        name = node_name(row.key, NodeRole.TAP)
        with blame(mark.link, row.local.netns, row.local.intf):
            try:
                with open_netns(self._host) as hns, netlink(hns) as ipr:
                    found = iface.find(ipr, name)
                    if (row.local.netns, row.local.intf) not in keep:
                        node = Side(hns, ipr)
                        podend.release(mark, row.local, node, row.kind)
                    if found is not None and found.kind == KIND and found.mark == mark:
                        iface.delete(ipr, found.index)
                    clear_leftovers(ipr, mark, [temp_name(row.key, Role.TAP)], self._host)
            except (NetnsGone, NotANetns):
                return

    def vacate(self, row: LinkRow, keep: Collection[tuple[str, str]] = ()) -> None:
        """Remove the pod end unless it is in `keep` and keep the wire and its TAP: the
        row's pod end moved (a pod's new sandbox has a new netns path), the far end
        did not, so `update` stitches the new pod end to the same TAP and the peer is
        not asked again."""
        if (row.local.netns, row.local.intf) in keep:
            return
        mark = Mark(row.namespace, row.uid)
        with blame(mark.link, row.local.netns, row.local.intf):
            try:
                with open_netns(self._host) as hns, netlink(hns) as ipr:
                    podend.release(mark, row.local, Side(hns, ipr), row.kind, self._reaper)
            except (NetnsGone, NotANetns):
                return

    def _spec(self, row: LinkRow, name: str) -> TapSpec:
        return TapSpec(name, row.mtu or default(Config, "mtu"), self._offloads)

    def _create(
        self, row: LinkRow, mark: Mark, ns: Netns, ipr: Any, name: str
    ) -> tuple[int, iface.Iface]:
        """A new marked TAP in `ns` (`ipr` talks to it) as `name`: its fd, and it."""
        temp = temp_name(row.key, Role.TAP)
        fds: list[int] = []

        def create() -> None:
            fds.append(open_tap_in(ns.path, self._spec(row, temp)))
            made = iface.find(ipr, temp)
            if made is not None:
                # Before it is first up: it would send solicitations to the far pod.
                ipr.rtnl.request(rtnl.no_ipv6_addresses(made.index))

        try:
            (made,) = create_and_rename(mark, create, [RenameTarget(temp, ns, ipr, name)])
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return fds[0], made

    def _attach(self, row: LinkRow, mark: Mark, ipr: Any, found: iface.Iface, name: str) -> int:
        """An fd on the existing TAP `found`, after checking the name still means it.

        Attaching by name creates a TAP if the name vanished meanwhile; such an
        unmarked newcomer is deleted again and the attempt retried.
        """
        fd = open_tap_in(self._host, self._spec(row, name))
        now = iface.find(ipr, name)
        if now is not None and now.index == found.index:
            return fd
        os.close(fd)
        if now is not None and now.mark is None and now.kind == KIND:
            iface.delete(ipr, now.index)
        raise LinkError(mark.link, self._host, name, "TAP vanished while attaching to it")
