"""The handshake loop: joins this node's wires to their far ends, one peer node at a time.

It serves the manager's `nodes` queue (keys are peer node IPs, coalesced and
debounced behind each pass like every key). A pass over node N sends, batched, first the
goodbyes owed to N (DeleteWires), then an offer for every wire towards N that
wants a handshake (CreateWires), each RPC with the per-call timeout
(`peer.rpc_timeout`, 5 s, KNE #743). Answers go to the manager. If anything
towards N is still wanted after the pass, N is queued again with its backoff
(100 ms doubling to 60 s); otherwise its backoff is forgotten.

This runs beside the link reconciler, never inside it: a node that does not
answer delays only its own wires, by at most its timeout per pass, and passes
for different nodes run concurrently.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TypeVar

from meshwire.control.wire.manager import WireManager
from meshwire.control.wire.types import PeerClient, PeerError
from meshwire.proto import meshwire_pb2

log = logging.getLogger(__name__)

# Wires per RPC: a CreateWires of 1,000 offers is about 60 KiB.
BATCH = 1000
# Peer nodes served at once.
CONCURRENCY = 8

T = TypeVar("T")


def chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class Handshaker:
    def __init__(
        self,
        manager: WireManager,
        client: PeerClient,
        node_name: str,
        concurrency: int = CONCURRENCY,
        batch: int = BATCH,
    ) -> None:
        self.manager = manager
        self.client = client
        self.node_name = node_name
        self.concurrency = concurrency
        self.batch = batch
        # RPCs made, by method and outcome, for metrics and tests.
        self.calls: dict[tuple[str, bool], int] = {}

    async def run(self) -> None:
        """Serve the queue until it shuts down."""
        workers = [asyncio.create_task(self._worker()) for _ in range(self.concurrency)]
        try:
            await asyncio.gather(*workers)
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def _worker(self) -> None:
        queue = self.manager.nodes
        while (node_ip := await queue.get()) is not None:
            try:
                await self.pass_over(node_ip)
            except Exception:  # a bug here must not stop other nodes' handshakes
                log.exception("handshake with node %s failed", node_ip)
                queue.add_rate_limited(node_ip)
            else:
                if self.manager.needs_handshake(node_ip):
                    queue.add_rate_limited(node_ip)
                else:
                    queue.forget(node_ip)
            finally:
                queue.done(node_ip)

    async def pass_over(self, node_ip: str) -> None:
        """One pass over `node_ip`: its goodbyes, then its offers."""
        manager = self.manager
        for goodbyes in chunks(manager.goodbyes_for(node_ip), self.batch):
            request = meshwire_pb2.DeleteWiresRequest(
                node=self.node_name,
                node_ip=manager.node_ip,
                wires=[
                    meshwire_pb2.WireEnd(namespace=g.namespace, uid=g.uid, pod=g.pod)
                    for g in goodbyes
                ],
            )
            try:
                await self.client.delete_wires(node_ip, request)
            except PeerError as exc:
                self._count("DeleteWires", False)
                manager.goodbyes_sent(goodbyes, failure=str(exc))
            else:
                self._count("DeleteWires", True)
                manager.goodbyes_sent(goodbyes)
        for batch in chunks(manager.offers_for(node_ip), self.batch):
            keys = [key for key, _ in batch]
            request = meshwire_pb2.CreateWiresRequest(
                node=self.node_name,
                node_ip=manager.node_ip,
                offloads=manager.offloads,
                wires=[offer for _, offer in batch],
            )
            try:
                reply = await self.client.create_wires(node_ip, request)
            except PeerError as exc:
                self._count("CreateWires", False)
                log.info("handshake of %d wires with node %s: %s", len(keys), node_ip, exc)
                manager.unreachable(node_ip, keys, str(exc))
                continue
            self._count("CreateWires", True)
            if len(reply.wires) != len(keys):
                why = f"answered {len(reply.wires)} of {len(keys)} offers"
                manager.unreachable(node_ip, keys, why)
                continue
            for key, answer in zip(keys, reply.wires, strict=True):
                manager.answered(node_ip, key, answer)

    def _count(self, method: str, ok: bool) -> None:
        self.calls[(method, ok)] = self.calls.get((method, ok), 0) + 1
