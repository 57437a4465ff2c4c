"""The network between the real nodes of a cluster (tests/kube_nodes.py): their underlay.

`Underlay()` is a bridge in a hub netns of its own (`mwrh-<id>`). `attach(netns, ip)`
joins a node's netns to it by a veth made inside the hub (`n<last octet>` there, `underlay` in
the node, jumbo MTU so a 1,500-byte vxlan frame is never fragmented) and puts the
node's address on the node's end: the nodes reach one another's addresses
(198.18.<x>.<n>/24, one random x per underlay) through the bridge and nothing else,
so vxlan, the gRPC wire and the peer RPCs between their daemons cross it. Nothing is
made in the host's netns.

`cut(netns)` takes the hub's end of a node's veth down (the node's end loses carrier,
as when its cable is pulled) and `reconnect(netns)` brings it up again. `close()`
deletes the hub netns, and with it every hub end; a node's end goes with its netns.
"""

from __future__ import annotations

import random
import secrets
import subprocess

MTU = 9216
NODE_INTERFACE = "underlay"
BRIDGE = "br0"


def _ip(netns: str, *args: str) -> None:
    done = subprocess.run(["ip", "-n", netns, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip -n {netns} {' '.join(args)}: {done.stderr.strip()}")


class Underlay:
    """One bridge that the nodes' netns hang from; see the module doc."""

    def __init__(self) -> None:
        self.name = f"mwrh-{secrets.token_hex(3)}"
        self.prefix = f"198.18.{random.Random().randint(1, 254)}"
        self._ports: dict[str, str] = {}  # node netns -> its veth's end in the hub
        subprocess.run(["ip", "netns", "add", self.name], check=True, capture_output=True)
        try:
            _ip(self.name, "link", "set", "lo", "up")
            _ip(self.name, "link", "add", BRIDGE, "mtu", str(MTU), "type", "bridge")
            _ip(self.name, "link", "set", BRIDGE, "up")
        except BaseException:
            self.close()
            raise

    def address(self, index: int) -> str:
        """The address of the `index`th node (0-based)."""
        return f"{self.prefix}.{index + 1}"

    def attach(self, netns: str, ip: str) -> None:
        """Join the node netns `netns` (a name under /run/netns) to the bridge, with `ip`
        (one of `address`'s); nodes may attach at once."""
        port = f"n{ip.rsplit('.', 1)[1]}"
        _ip(self.name, "link", "add", port, "mtu", str(MTU), "type", "veth",
            "peer", "name", NODE_INTERFACE, "mtu", str(MTU), "netns", netns)  # fmt: skip
        self._ports[netns] = port
        _ip(self.name, "link", "set", port, "master", BRIDGE, "up")
        _ip(netns, "addr", "add", f"{ip}/24", "dev", NODE_INTERFACE)
        _ip(netns, "link", "set", NODE_INTERFACE, "up")

    def cut(self, netns: str) -> None:
        _ip(self.name, "link", "set", self._ports[netns], "down")

    def reconnect(self, netns: str) -> None:
        _ip(self.name, "link", "set", self._ports[netns], "up")

    def close(self) -> None:
        """Delete the hub netns; safe to call twice."""
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
