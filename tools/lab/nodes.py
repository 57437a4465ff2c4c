"""Simulated nodes: a namespace per node, joined by an underlay bridge in a hub namespace.

    netns mwl<lab>-hub: bridge mwl<lab>-br 169.254.0.1/16
        ├─ mwl<lab>-h1 ══ veth ══ eth0 169.254.0.11/16 (netns mwl<lab>-node1)
        └─ mwl<lab>-h2 ══ veth ══ eth0 169.254.0.12/16 (netns mwl<lab>-node2)

A node's underlay interface is `eth0`, as on a real host: the vxlan links
run over it, and a macvlan link to `localhost:eth0` sits on it. The underlay
carries jumbo frames (`UNDERLAY_MTU`), as a datacenter fabric does.

Nothing is added to the host's namespace: the link-local /16 lives only in the
hub and node namespaces (on the host it would shadow the cloud metadata route).
Each function is idempotent: an existing namespace, interface or address is
kept, so a repeated or resumed step is harmless. Errors are LabError naming the
node or interface.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from meshwire.tools.lab import netns
from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.lab_names import (
    HUB_IP,
    UNDERLAY_INTF,
    UNDERLAY_PREFIX_LEN,
    LabNames,
    netns_path,
)

EEXIST = 17
# The underlay's MTU, a datacenter switch's usual jumbo maximum: a vxlan link of MTU
# up to 9,166 fits with its 50-byte header. At 1,500 every frame of a 1,500-byte
# vxlan link went out as two IP fragments, reassembled on the far node.
UNDERLAY_MTU = 9216


def create_hub(names: LabNames) -> None:
    """The hub namespace (already recorded in the state) with its bridge up and addressed."""
    netns.create(names.hub_netns)

    def build() -> None:
        with IPRoute() as ipr:
            if not ipr.link_lookup(ifname=names.bridge):
                ipr.link("add", ifname=names.bridge, kind="bridge")
            index = ipr.link_lookup(ifname=names.bridge)[0]
            _add_address(ipr, index, HUB_IP)
            ipr.link("set", index=index, mtu=UNDERLAY_MTU, state="up")

    _in(names.hub_netns, build, f"hub bridge {names.bridge}")


def create_node(names: LabNames, node: str, ip: str) -> None:
    """The node's namespace, plugged into the hub bridge with underlay address `ip`."""
    node_ns = names.node_netns(node)
    netns.create(node_ns)
    hub_port, node_port = names.hub_port(node), UNDERLAY_INTF

    def plug_hub() -> None:
        with IPRoute() as ipr:
            if not ipr.link_lookup(ifname=hub_port):
                with open(netns_path(node_ns)) as target:
                    ipr.link(
                        "add",
                        ifname=hub_port,
                        kind="veth",
                        peer={"ifname": node_port, "net_ns_fd": target.fileno()},
                    )
            index = ipr.link_lookup(ifname=hub_port)[0]
            bridge = ipr.link_lookup(ifname=names.bridge)[0]
            ipr.link("set", index=index, mtu=UNDERLAY_MTU)
            ipr.link("set", index=index, master=bridge, state="up")

    def address_node() -> None:
        with IPRoute() as ipr:
            found = ipr.link_lookup(ifname=node_port)
            if not found:
                raise LabError(f"node {node}: underlay interface {node_port} missing")
            _add_address(ipr, found[0], ip)
            ipr.link("set", index=found[0], mtu=UNDERLAY_MTU, state="up")

    _in(names.hub_netns, plug_hub, f"node {node}: hub port {hub_port}")
    _in(node_ns, address_node, f"node {node}: underlay {node_port}")


def add_local_address(names: LabNames, node: str, ip: str) -> None:
    """Make `ip` an address of the node namespace's `lo` (a /32 or /128), so a process
    there can listen on it; a loopback address is one already."""
    if ipaddress.ip_address(ip).is_loopback:
        return

    def add() -> None:
        with IPRoute() as ipr:
            index = ipr.link_lookup(ifname="lo")[0]
            try:
                ipr.addr(
                    "add", index=index, address=ip, prefixlen=ipaddress.ip_address(ip).max_prefixlen
                )
            except NetlinkError as exc:
                if exc.code != EEXIST:
                    raise

    _in(names.node_netns(node), add, f"node {node}: address {ip} on lo")


def set_plugged(names: LabNames, node: str, plugged: bool) -> None:
    """Cut the node off the underlay (its hub port down: no carrier on its eth0) or
    plug it back. The node's processes run on; only the wire between them is cut."""
    port = names.hub_port(node)

    def switch() -> None:
        with IPRoute() as ipr:
            found = ipr.link_lookup(ifname=port)
            if not found:
                raise LabError(f"node {node}: hub port {port} missing")
            ipr.link("set", index=found[0], state="up" if plugged else "down")

    _in(names.hub_netns, switch, f"node {node}: hub port {port}")


def _add_address(ipr: IPRoute, index: int, ip: str) -> None:
    try:
        ipr.addr("add", index=index, address=ip, prefixlen=UNDERLAY_PREFIX_LEN)
    except NetlinkError as exc:
        if exc.code != EEXIST:
            raise


def _in(ns: str, fn: Callable[[], None], what: str) -> None:
    try:
        netns.in_netns(ns, fn)
    except (NetlinkError, OSError) as exc:
        raise LabError(f"{what}: {exc}") from exc
