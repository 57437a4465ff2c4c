"""`NodeWatch`: which nodes of the cluster are gone, so the links to them lose carrier.

A pod on a node that is removed from the cluster (`kubectl delete node`, its pods
force-deleted) never gets a CNI DEL, so its Topology keeps the status its node's
daemon wrote, and the far ends on other nodes would keep their carrier, joined to a
node that is no more (meshnet #85). The daemon follows the Node objects (config
`api.follow_nodes`; deploy/ turns it on and grants `list`/`watch` on nodes) and
derivation treats a peer whose `src_ip` is no address of any Node as not running:
the near end stays, without carrier, until the peer runs again somewhere.

A node that is down but still a Node object (a stopped kubelet, a cut underlay) is
not gone: its links wait for it. `gone` answers False until the first list, and
for as long as this node's own address is not among the Nodes' addresses (the
daemon's `node_ip` is then not how the cluster names its nodes, and following them
would detach every link). `on_change` is called whenever the set of addresses
changes; the daemon then derives its pods again. The Nodes are followed by a
`Reflector`: API failures are logged and retried with its backoff, and the last
list answered stands meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from meshwire.base import hostport
from meshwire.control.common.config import ApiConfig, default
from meshwire.control.informer.reflector import Reflector
from meshwire.control.informer.sources import Nodes

if TYPE_CHECKING:
    from kubernetes.aio.client import ApiClient

log = logging.getLogger(__name__)

# The Node addresses a daemon's `node_ip` (its `status.src_ip`) may be.
ADDRESS_TYPES = ("InternalIP", "ExternalIP")


class NodeWatch:
    def __init__(
        self,
        node_ip: str,
        on_change: Callable[[], None],
        *,
        request_timeout: float = default(ApiConfig, "request_timeout"),
        watch_timeout: int = default(ApiConfig, "watch_timeout"),
    ) -> None:
        self.node_ip = hostport.canonical(node_ip)
        self.on_change = on_change
        self.request_timeout = request_timeout
        self.watch_timeout = watch_timeout
        # Node name -> its addresses; None until the first list.
        self._nodes: dict[str, frozenset[str]] | None = None
        self._addresses: frozenset[str] = frozenset()

    def gone(self, ip: str) -> bool:
        """Whether `ip` (a Topology's `src_ip`) is the address of no Node any more."""
        if self._nodes is None or self.node_ip not in self._addresses:
            return False
        return hostport.canonical(ip) not in self._addresses

    async def run(self, api: ApiClient) -> None:
        reflector = Reflector(
            Nodes(api), self, request_timeout=self.request_timeout, watch_timeout=self.watch_timeout
        )
        await reflector.run()

    # -- the reflector's handler --------------------------------------------------

    def listed(self, items: list[Any]) -> None:
        self._nodes = {}
        for item in items:
            name, addresses = _node(item)
            if name:
                self._nodes[name] = addresses
        self._update()

    def changed(self, event_type: str, obj: Any) -> None:
        if self._nodes is None:
            return
        name, addresses = _node(obj)
        if not name:
            return
        if event_type == "DELETED":
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = addresses
        self._update()

    def _update(self) -> None:
        assert self._nodes is not None
        addresses = frozenset().union(*self._nodes.values())
        if addresses == self._addresses:
            return
        left = sorted(self._addresses - addresses)
        self._addresses = addresses
        if self.node_ip not in addresses:
            log.warning(
                "nodes: this node's address %s is no Node's address (%s): links to removed "
                "nodes keep their carrier",
                self.node_ip, ", ".join(sorted(addresses)) or "no Node",
            )  # fmt: skip
        elif left:
            log.info("nodes: %s no longer a Node's address; links to it lose carrier", left)
        self.on_change()


def _node(obj: Any) -> tuple[str, frozenset[str]]:
    """A Node object's name and addresses (canonical); ("", ...) if it has no name."""
    if not isinstance(obj, dict):
        return "", frozenset()
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    status = obj.get("status")
    entries = status.get("addresses") if isinstance(status, dict) else None
    addresses = {
        hostport.canonical(entry["address"])
        for entry in entries or []
        if isinstance(entry, dict)
        and entry.get("type") in ADDRESS_TYPES
        and isinstance(entry.get("address"), str)
    }
    return (name if isinstance(name, str) else ""), frozenset(addresses)
