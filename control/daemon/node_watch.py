"""`NodeWatch`: what the cluster's Node objects say of the nodes: which are gone, and
which transport each node's daemon carries its cross-node links on.

Gone. A pod on a node that is removed from the cluster (`kubectl delete node`, its
pods force-deleted) never gets a CNI DEL, so its Topology keeps the status its node's
daemon wrote, and the far ends on other nodes would keep their carrier, joined to a
node that is no more (meshnet #85). The daemon follows the Node objects (config
`api.follow_nodes`; deploy/ turns it on and grants `list`/`watch` on nodes) and
derivation treats a peer whose `src_ip` is no address of any Node as not running:
the near end stays, without carrier, until the peer runs again somewhere.

A node that is down but still a Node object (a stopped kubelet, a cut underlay) is
not gone: its links wait for it. `gone` answers False until the first list, and
for as long as this node's own address is not among the Nodes' addresses (the
daemon's `node_ip` is then not how the cluster names its nodes, and following them
would detach every link).

Link type. Each daemon writes its `inter_node_link_type` on its own Node, as the
annotation `LINK_TYPE` (through the Node's status subresource: deploy/ grants
`patch` on `nodes/status`), and `link_type(ip)` answers what the Node of that
address carries: "vxlan", "grpc", or None (no valid annotation, or not listed yet).
Derivation builds a link grpc only while both its nodes say grpc (derive.py), so
a rolling change of `inter_node_link_type` moves each link once, when its second
node's annotation changes, on both nodes at once: both see the same watch event. A
daemon writes its annotation only once `run`'s `ready` is set (the daemon's first
reconcile is done, every link built or adopted as the annotation then said), and
again whenever its Node shows another value (a Node registered anew has none).
A write that fails is retried with backoff; one the API refuses for good (403,
no such Node: 404) is logged and not retried until the Node changes. Until a
write lands, this node's own annotation says what it carries; after a refusal,
its config does, until the Node says the same.

`on_change` is called whenever the addresses or the link types change; the daemon
then derives its pods again. The Nodes are followed by a `Reflector`: API failures
are logged and retried with its backoff, and the last list answered stands
meanwhile. `synced` is set at the first list.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kubernetes.aio.client.exceptions import ApiException

from meshwire.base import hostport
from meshwire.control.common.config import ApiConfig, default
from meshwire.control.common.retries import Backoff
from meshwire.control.informer.failure import describe
from meshwire.control.informer.reflector import RECONNECT, Reflector
from meshwire.control.informer.sources import Nodes, annotate_node

if TYPE_CHECKING:
    from kubernetes.aio.client import ApiClient

log = logging.getLogger(__name__)

# The Node addresses a daemon's `node_ip` (its `status.src_ip`) may be.
ADDRESS_TYPES = ("InternalIP", "ExternalIP")
# The annotation a daemon writes on its own Node: its `inter_node_link_type`.
LINK_TYPE = "meshwire.dev/inter-node-link-type"
LINK_TYPES = ("vxlan", "grpc")
# The API's answers that the same write would get again: refused, or no such Node.
REFUSED = (401, 403, 404)


@dataclass(frozen=True, slots=True)
class _Node:
    addresses: frozenset[str]
    # The annotation's value as written; `link_type` is it when valid.
    annotation: str | None

    @property
    def link_type(self) -> str | None:
        return self.annotation if self.annotation in LINK_TYPES else None


class NodeWatch:
    def __init__(
        self,
        node_ip: str,
        on_change: Callable[[], None],
        *,
        node_name: str = "",
        link_type: str = "",
        request_timeout: float = default(ApiConfig, "request_timeout"),
        watch_timeout: int = default(ApiConfig, "watch_timeout"),
    ) -> None:
        """`node_name`, `link_type`: this node's Node and what `run` writes on it
        ("" for either: nothing is written)."""
        self.node_ip = hostport.canonical(node_ip)
        self.on_change = on_change
        self.node_name = node_name
        self.own_link_type = link_type
        self.request_timeout = request_timeout
        self.watch_timeout = watch_timeout
        self.synced = asyncio.Event()
        # Node name -> what it says; None until the first list.
        self._nodes: dict[str, _Node] | None = None
        self._addresses: frozenset[str] = frozenset()
        # Address -> the link type its Node says.
        self._link_types: dict[str, str] = {}
        # Set while this node's Node says another link type than ours.
        self._stale = asyncio.Event()
        # The API refused our annotation: our Node's annotation no longer says what we carry.
        self._refused = False

    def gone(self, ip: str) -> bool:
        """Whether `ip` (a Topology's `src_ip`) is the address of no Node any more."""
        if self._nodes is None or self.node_ip not in self._addresses:
            return False
        return hostport.canonical(ip) not in self._addresses

    def link_type(self, ip: str) -> str | None:
        """The link type the Node of address `ip` says its daemon carries; None if it
        says none (or nothing is listed yet, or it is ours and the API refused it)."""
        address = hostport.canonical(ip)
        if address == self.node_ip and self._refused:
            return None
        return self._link_types.get(address)

    async def run(self, api: ApiClient, ready: asyncio.Event | None = None) -> None:
        """Follows the Nodes; once `ready` is set, keeps this node's annotation."""
        reflector = Reflector(
            Nodes(api), self, request_timeout=self.request_timeout, watch_timeout=self.watch_timeout
        )
        if not (self.node_name and self.own_link_type):
            await reflector.run()
            return
        writer = asyncio.create_task(self._keep_annotation(api, ready))
        try:
            await reflector.run()
        finally:
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)

    async def _keep_annotation(self, api: ApiClient, ready: asyncio.Event | None) -> None:
        if ready is not None:
            await ready.wait()
        backoff = Backoff(RECONNECT)
        while True:
            await self._stale.wait()
            self._stale.clear()
            try:
                await annotate_node(
                    api, self.node_name, {LINK_TYPE: self.own_link_type}, self.request_timeout
                )
            except ApiException as exc:
                if exc.status in REFUSED:
                    log.warning(
                        "nodes: cannot write %s=%s on Node %s: %s; peers keep what it says "
                        "now, and this node carries its links as its config says",
                        LINK_TYPE, self.own_link_type, self.node_name, describe(exc),
                    )  # fmt: skip
                    self._refuse()
                    continue
                await self._retry_later(backoff, exc)
            except Exception as exc:  # a connection's failure, a timeout: retried
                await self._retry_later(backoff, exc)
            else:
                backoff.healthy()
                log.info(
                    "nodes: wrote %s=%s on Node %s", LINK_TYPE, self.own_link_type, self.node_name
                )

    async def _retry_later(self, backoff: Backoff, exc: Exception) -> None:
        delay = backoff.next_delay()
        log.warning(
            "nodes: writing %s on Node %s failed (%s); again in %.1fs",
            LINK_TYPE, self.node_name, describe(exc), delay,
        )  # fmt: skip
        await asyncio.sleep(delay)
        self._stale.set()

    def _refuse(self) -> None:
        if not self._refused:
            self._refused = True
            self.on_change()

    # -- the reflector's handler --------------------------------------------------

    def listed(self, items: list[Any]) -> None:
        self._nodes = {}
        for item in items:
            name, node = _node(item)
            if name:
                self._nodes[name] = node
        self._seen_own(self._nodes.get(self.node_name))
        self._update()
        self.synced.set()

    def changed(self, event_type: str, obj: Any) -> None:
        if self._nodes is None:
            return
        name, node = _node(obj)
        if not name:
            return
        if event_type == "DELETED":
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = node
        if name == self.node_name:
            self._seen_own(None if event_type == "DELETED" else node)
        self._update()

    def _seen_own(self, node: _Node | None) -> None:
        """Our Node as the API has it now (None: there is none): wake the writer if
        it says another link type than ours."""
        if node is None:
            self._stale.clear()
        elif node.annotation == self.own_link_type:
            self._stale.clear()
            # It says what we carry: what was refused is no longer in the way.
            self._refused = False
        else:
            # Refused or not, the Node changed (registered anew, its annotation edited):
            # try again; until a write lands, a refusal stands.
            self._stale.set()

    def _update(self) -> None:
        assert self._nodes is not None
        addresses = frozenset().union(*(node.addresses for node in self._nodes.values()))
        link_types = {
            address: node.link_type
            for node in self._nodes.values()
            if node.link_type is not None
            for address in node.addresses
        }
        if addresses == self._addresses and link_types == self._link_types:
            return
        changed_types = sorted(
            f"{address}: {self._link_types.get(address)} -> {link_types.get(address)}"
            for address in set(self._link_types) | set(link_types)
            if self._link_types.get(address) != link_types.get(address)
        )
        left = sorted(self._addresses - addresses)
        self._link_types = link_types
        if addresses != self._addresses:
            self._addresses = addresses
            if self.node_ip not in addresses:
                log.warning(
                    "nodes: this node's address %s is no Node's address (%s): links to "
                    "removed nodes keep their carrier",
                    self.node_ip, ", ".join(sorted(addresses)) or "no Node",
                )  # fmt: skip
            elif left:
                log.info("nodes: %s no longer a Node's address; links to it lose carrier", left)
        if changed_types:
            log.info("nodes: link types %s", "; ".join(changed_types))
        self.on_change()


def _node(obj: Any) -> tuple[str, _Node]:
    """A Node object's name, addresses (canonical) and link type annotation; ("", ...)
    if it has no name."""
    if not isinstance(obj, dict):
        return "", _Node(frozenset(), None)
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    name = metadata.get("name")
    annotations = metadata.get("annotations")
    annotation = annotations.get(LINK_TYPE) if isinstance(annotations, dict) else None
    status = obj.get("status")
    entries = status.get("addresses") if isinstance(status, dict) else None
    addresses = {
        hostport.canonical(entry["address"])
        for entry in entries or []
        if isinstance(entry, dict)
        and entry.get("type") in ADDRESS_TYPES
        and isinstance(entry.get("address"), str)
    }
    return (name if isinstance(name, str) else ""), _Node(
        frozenset(addresses), annotation if isinstance(annotation, str) else None
    )
