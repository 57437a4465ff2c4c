"""The Topology informer: a `Reflector` over the Topology objects, into a `TopologySink`.

The reflector (reflector.py) lists, watches, relists on 410 and backs off;
this module makes the sink equal to what it hands over. A full list replaces
the sink's content (changed objects upserted, vanished ones deleted), so
deletions made while nobody watched arrive as deletions; each watch event is
one write, and only a real change is one (see `apply.py`). After the first list
the sink is marked initialized and `synced` is set.

`run()` returns only by cancellation. Values are compared rather than
resourceVersions, so a server that sets none still works.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from kubernetes.aio.client import ApiClient

from meshwire.control.common import heap
from meshwire.control.common.config import ApiConfig, default
from meshwire.control.common.retries import BackoffPolicy, Now
from meshwire.control.informer.apply import Outcome, Snapshot, apply_event, apply_snapshot
from meshwire.control.informer.reflector import PAGE_SIZE, RECONNECT, Reflector, Sleep
from meshwire.control.informer.sink import TopologySink
from meshwire.control.informer.sources import CustomObjects
from meshwire.control.informer.stats import InformerStats
from meshwire.control.model.topology import GROUP, PLURAL, VERSION

log = logging.getLogger(__name__)

# What a 404 on the list or the watch means.
NOT_SERVED = (
    f"this API server serves no {PLURAL}.{GROUP}/{VERSION}: "
    "install the Topology CRD (deploy/crd.yaml)"
)


@dataclass(frozen=True, slots=True)
class InformerOptions:
    """How the informer talks to the API; defaults mirror the `api.*` config keys."""

    # Watch this namespace only; "" watches all namespaces, as meshnet does.
    namespace: str = default(ApiConfig, "namespace")
    page_size: int = PAGE_SIZE
    # Client timeout (s) of a list page, and the grace past `watch_timeout`
    # after which the client abandons a watch the server did not end.
    request_timeout: float = default(ApiConfig, "request_timeout")
    # Server-side timeoutSeconds of a watch. It also bounds, with
    # `request_timeout`, how long a half-open connection goes unnoticed, so the
    # client timeout of a watch (their sum) always exceeds the server's
    # timeout and its bookmark interval.
    watch_timeout: int = default(ApiConfig, "watch_timeout")
    backoff: BackoffPolicy = RECONNECT


class Informer:
    """Keeps a `TopologySink` equal to the cluster's Topology objects.

    The sink sees one write per real change (see `apply.py`); deletions made
    while disconnected arrive as deletions on the next relist. `synced` is set
    once the first full list has been applied, never before.
    """

    def __init__(
        self,
        api: ApiClient,
        sink: TopologySink,
        options: InformerOptions | None = None,
        *,
        clock: Now = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._sink = sink
        self.options = options = options or InformerOptions()
        self.stats = InformerStats()
        self.synced = asyncio.Event()
        self.reflector = Reflector(
            CustomObjects(api, GROUP, VERSION, PLURAL, options.namespace),
            self,
            request_timeout=options.request_timeout,
            watch_timeout=options.watch_timeout,
            page_size=options.page_size,
            backoff=options.backoff,
            not_found=NOT_SERVED,
            stats=self.stats,
            clock=clock,
            sleep=sleep,
        )

    async def run(self) -> None:
        """List and watch until cancelled; never raises anything else."""
        await self.reflector.run()

    # -- the reflector's handler ------------------------------------------------

    def listed(self, items: list[Any]) -> None:
        snapshot = Snapshot()
        with heap.bulk():
            for item in items:
                snapshot.add(item)
            result = apply_snapshot(self._sink, snapshot)
        self.stats.unreadable += len(snapshot.unreadable)
        self.stats.changes += result.upserted + result.deleted
        log.info(
            "topologies: listed %d at resourceVersion %s (%d changed, %d deleted, %d unreadable)",
            len(snapshot.topologies),
            self.stats.resource_version,
            result.upserted,
            result.deleted,
            len(snapshot.unreadable),
        )
        if not self.synced.is_set():
            self._sink.mark_initialized()
            self.synced.set()

    def changed(self, event_type: str, obj: Any) -> None:
        outcome = apply_event(self._sink, event_type, obj)
        if outcome is Outcome.CHANGED:
            self.stats.changes += 1
        elif outcome is Outcome.UNREADABLE:
            self.stats.unreadable += 1
