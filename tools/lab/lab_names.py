"""Every name and address a lab uses, derived from the lab's name: the one place that names things.

Everything the lab creates carries the prefix `mwl<name>-`, so `lab down` and
the tests can tell the lab's objects from anything else on the machine. The
lab name is 1-7 lower-case letters or digits: the longest interface name,
`mwl<name>-h<node number>`, must fit the kernel's 15 bytes.

Addresses are link-local (169.254.0.0/16) and exist only inside the lab's hub
and node namespaces, never in the host's: the hub bridge is 169.254.0.1 (the
API listens there) and node i is 169.254.0.(10 + i).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from meshwire.tools.lab.errors import LabError

NAME_PATTERN = re.compile(r"^[a-z0-9]{1,7}$")
MAX_NODES = 240
NETNS_DIR = "/var/run/netns"
UNDERLAY_PREFIX_LEN = 16
HUB_IP = "169.254.0.1"
# The embedded API listens on HUB_IP:API_PORT inside the hub (kubectl proxy's plain-HTTP port).
API_PORT = 8001
FIRST_NODE_HOST = 10
# A node's underlay interface, inside its node namespace: `eth0`, as on a real host,
# so a macvlan link to `localhost:eth0` (meshnet's macvlan.yml) finds it there and its
# frames leave the node on the underlay. Free in a fresh namespace: no prefix needed.
UNDERLAY_INTF = "eth0"


def check_lab_name(name: str) -> str:
    if not NAME_PATTERN.match(name):
        raise LabError(
            f"lab name {name!r}: must be 1-7 lower-case letters or digits "
            "(it prefixes interface names, which the kernel limits to 15 bytes)"
        )
    return name


@dataclass(frozen=True, slots=True)
class LabNames:
    lab: str

    @property
    def prefix(self) -> str:
        return f"mwl{self.lab}-"

    @property
    def hub_netns(self) -> str:
        return f"{self.prefix}hub"

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br"

    def node_name(self, index: int) -> str:
        """Node `index` (1-based) is `node<index>`: the name users pass to move-pod."""
        return f"node{index}"

    def node_netns(self, node: str) -> str:
        return f"{self.prefix}{node}"

    def node_index(self, node: str) -> int:
        """The index of a node name; raises LabError for a name that is not `node<n>`."""
        match = re.fullmatch(r"node([1-9][0-9]*)", node)
        if not match or int(match.group(1)) > MAX_NODES:
            raise LabError(f"node {node!r}: not a lab node name (node1 .. node{MAX_NODES})")
        return int(match.group(1))

    def hub_port(self, node: str) -> str:
        """The node's veth end on the hub bridge."""
        return f"{self.prefix}h{self.node_index(node)}"

    @property
    def containerd_namespace(self) -> str:
        """The containerd namespace holding the lab's images and containers (containerd.py)."""
        return f"{self.prefix}pods"

    def pod_netns(self, namespace: str, pod: str) -> str:
        # A Kubernetes namespace never contains a dot, so the first dot splits
        # the two unambiguously, and no pod name collides with `hub`/`node<n>`.
        return f"{self.prefix}{namespace}.{pod}"


def netns_path(netns: str) -> str:
    return f"{NETNS_DIR}/{netns}"


def resolve(netns: str) -> str:
    """A namespace name (`mwlx-hub`) or a path (`/proc/1/ns/net`) -> its path."""
    return netns if netns.startswith("/") else netns_path(netns)


def node_ip(index: int) -> str:
    if not 1 <= index <= MAX_NODES:
        raise LabError(f"node index {index}: must be 1..{MAX_NODES}")
    return f"169.254.0.{FIRST_NODE_HOST + index}"


def check_node_count(count: int) -> int:
    if not 1 <= count <= MAX_NODES:
        raise LabError(f"--nodes {count}: must be 1..{MAX_NODES}")
    return count
