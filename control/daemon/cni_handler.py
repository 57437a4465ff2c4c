"""What the daemon does for each CNI command (the `CniHandler` of `cni/endpoint.py`).

ADD records the pod on this node (`src_ip`, `net_ns`, `container_id` in its
Topology status, written to the table at once and to the API coalesced),
has the pod's links checked against the kernel again, then waits, bounded by
`cni.add_timeout`, until every link of the pod whose peer is running is
realised. Links to peers that are not running yet do not hold the
ADD: they are built when the peer comes up. It looks again exactly when the
links table tells it of a health write touching the pod (tables/health.py):
a row's verdict, a derivation of the pod.

DEL clears the pod's placement so its links are torn down here and on its
peers' nodes; a DEL for a container id the pod no longer has (a late DEL of a
previous sandbox) is ignored. The clear is written to the API only while the
status still names the deleted container: a clear held back by retries must
not wipe the placement the pod's new node wrote meanwhile. A pod in no
topology passes through untouched.

GC (CNI 1.1) releases, as a DEL would, each sandbox this node added through the
GC's network and the runtime no longer lists as a valid attachment (a DEL the
runtime gave up on); the ADDs are recorded in the sandbox store for this.

All three wait for the daemon's first sync (a DEL answered from an empty table
would be lost), and ask to be retried if it does not come within
`cni.add_timeout`. They also wait, within `cni.add_timeout`, until their
status write is in the API: once the runtime hears success, a daemon
restarted a moment later cannot have lost the placement, nor a clear. When
the write is late (the API is down), the command succeeds all the same if
the sandbox store keeps what it did (the ADD's sandbox, the DEL's deletion):
the write goes on in the background, and a daemon restarted before it lands
acts on the store (placements.py). Without the store's record it asks to be
retried. A pod can then restart during an API outage: a kubelet makes a new
sandbox only once the DEL of the old one succeeded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from meshwire.control.cni.protocol import CniError, CniRequest, ErrorCode
from meshwire.control.daemon.placements import PlacementKeeper, write_placement
from meshwire.control.daemon.plumbing_error import pod_errors
from meshwire.control.model.topology import Topology
from meshwire.control.reconcile.desired import DesiredLinks
from meshwire.control.reconcile.reconciler import LinkReconciler
from meshwire.control.tables.links import POD_INDEX
from meshwire.control.tables.local_placements import NOWHERE, PodPlacement
from meshwire.control.tables.topologies import TopologyTable

log = logging.getLogger(__name__)

# The line each ADD logs at info, in milliseconds from the request's arrival:
# until the first pass over one of the pod's links began (queue), the passes
# themselves (netlink: first start to last end; the driver's calls), until the
# handler saw every link realised (noticed), and the wait for the status write
# after that (status). `daemon_ms` is the whole; the shim's own part is what a
# caller measures around the exec minus it.
ADD_TIMINGS = (
    "CNI ADD %s timings: queue_ms=%.2f netlink_ms=%.2f noticed_ms=%.2f "
    "status_ms=%.2f daemon_ms=%.2f"
)
# A status write already on its way gets at least this long, even when the
# links took all of `cni.add_timeout`.
WRITE_GRACE = 0.5


class StatusSink(Protocol):
    """The status writer, as the handler uses it."""

    def set(self, key: str, if_container: str | None = None, **fields: str) -> None: ...

    async def written(self, key: str) -> None: ...


class DaemonCniHandler:
    def __init__(
        self,
        node_ip: str,
        topologies: TopologyTable,
        desired: DesiredLinks,
        reconciler: LinkReconciler,
        status: StatusSink,
        add_timeout: float,
        not_ready: Callable[[], str],
        placements: PlacementKeeper,
    ) -> None:
        self.node_ip = node_ip
        self.topologies = topologies
        self.desired = desired
        self.reconciler = reconciler
        self.links = reconciler.links
        self._status = status
        self.add_timeout = add_timeout
        self._not_ready = not_ready
        self.placements = placements

    async def add(self, request: CniRequest) -> None:
        received = time.monotonic()
        deadline = asyncio.get_running_loop().time() + self.add_timeout
        topology = await self._topology(request)
        if topology is None:
            return
        # Held first: the namespace is handed to the daemon before links are derived in it.
        recorded = self.placements.added(
            topology.key, request.container_id, request.netns, request.network
        )
        placement = PodPlacement(self.node_ip, request.netns, request.container_id)
        write_placement(self.topologies, self._status.set, topology.key, placement)
        # A new sandbox: its links are checked against the kernel even when they
        # derive as before (a netns at the same path, a DEL that never came).
        self.reconciler.verify(self.links.lookup(POD_INDEX, topology.key))
        await self._wait_links(topology.key, deadline)
        links_up = time.monotonic()
        await self._wait_written(topology.key, deadline, lambda: recorded)
        self._log_timings(topology.key, received, links_up, time.monotonic())

    async def delete(self, request: CniRequest) -> None:
        deadline = asyncio.get_running_loop().time() + self.add_timeout
        topology = await self._topology(request)
        if request.pod is not None:
            self.placements.deleted(request.pod.key, request.container_id)
        if topology is not None and self._clear(topology, request.container_id):
            deleted = request.container_id or topology.status.container_id
            await self._wait_written(topology.key, deadline, self._recorder(topology.key, deleted))

    async def check(self, request: CniRequest) -> None:
        topology = await self._topology(request)
        if topology is None:
            return
        converging, errors = self._progress(topology.key)
        if errors:
            raise CniError(ErrorCode.INTERNAL, f"pod {topology.key}: " + "; ".join(errors))
        if converging:
            raise CniError(ErrorCode.TRY_AGAIN_LATER, f"pod {topology.key}: links not realised yet")

    async def status(self) -> None:
        missing = self._not_ready()
        if missing:
            raise CniError(ErrorCode.PLUGIN_NOT_AVAILABLE, f"meshwire daemon not ready: {missing}")

    async def gc(self, request: CniRequest) -> None:
        """Every sandbox held here from an ADD through this network whose container is
        not among the runtime's valid attachments is gone: each is released as its DEL
        would have released it. Sandboxes of other networks, or of an unknown one, are
        kept: the runtime vouches only for the attachments of the network it names."""
        deadline = asyncio.get_running_loop().time() + self.add_timeout
        await self._synced()
        valid = {attachment.container_id for attachment in request.valid_attachments}
        cleared = []
        for key, held in sorted(self.placements.held_through(request.network).items()):
            if held.container_id in valid:
                continue
            log.info("CNI GC: container %s of pod %s is gone; releasing it", held.container_id, key)
            self.placements.deleted(key, held.container_id)
            topology = self.topologies.get(key)
            if topology is not None and self._clear(topology, held.container_id):
                cleared.append((key, held.container_id))
        for key, container_id in cleared:
            await self._wait_written(key, deadline, self._recorder(key, container_id))

    # -- helpers --------------------------------------------------------------

    def _log_timings(self, pod_key: str, received: float, links_up: float, answered: float) -> None:
        """One line splitting an ADD's time in the daemon (`ADD_TIMINGS`), for the
        restart benchmark and for anyone asking where a pod's start went."""
        keys = self.links.lookup(POD_INDEX, pod_key)
        span = self.reconciler.pass_span(keys, received)
        first, last = span if span is not None else (links_up, links_up)
        log.info(
            ADD_TIMINGS,
            pod_key,
            (first - received) * 1000,
            (last - first) * 1000,
            (links_up - last) * 1000,
            (answered - links_up) * 1000,
            (answered - received) * 1000,
        )

    async def _topology(self, request: CniRequest) -> Topology | None:
        if request.pod is None:
            return None
        await self._synced()
        return self.topologies.get(request.pod.key)

    async def _synced(self) -> None:
        try:
            await asyncio.wait_for(self.topologies.wait_initialized(), self.add_timeout)
        except TimeoutError:
            raise CniError(
                ErrorCode.TRY_AGAIN_LATER, "meshwire daemon has not synced topologies yet"
            ) from None
        self.placements.start()  # before this request changes what this node holds

    def _recorder(self, pod_key: str, container_id: str) -> Callable[[], bool]:
        """For `_wait_written`: record the deletion of sandbox `container_id` of the pod."""
        return lambda: self.placements.deleted_late(pod_key, container_id)

    def _clear(self, topology: Topology, container_id: str) -> bool:
        """Clear the placement that sandbox `container_id` ("": whichever) of `topology`'s
        pod left here; whether a status write was issued. A status naming another
        container (a late DEL of a previous sandbox) or another node is left alone."""
        current = topology.status.container_id
        if current and container_id and current != container_id:
            log.info(
                "placement of %s not cleared: container %s is not the pod's current %s",
                topology.key,
                container_id,
                current,
            )
            return False
        if topology.status.src_ip and topology.status.src_ip != self.node_ip:
            return False
        write_placement(
            self.topologies, self._status.set, topology.key, NOWHERE, container_id or None
        )
        return True

    def _progress(self, pod_key: str) -> tuple[bool, list[str]]:
        """(still converging, error messages) of the pod's links.

        Converging: derivation has changes for the pod to apply, a link is due but
        its namespace has no id slot yet, or a row is pending or failing with an
        error a retry may fix. Problems found by derivation (invalid links) and
        permanent errors are final until the topology changes.
        """
        keys = self.links.lookup(POD_INDEX, pod_key)
        converging = self.desired.owes(pod_key) or any(
            self.links.health(key).converging for key in keys
        )
        return converging, pod_errors(self.links, pod_key)

    async def _wait_written(
        self, pod_key: str, deadline: float, recorded: Callable[[], bool]
    ) -> None:
        """Until the pod's status write is in the API. Past the deadline the command still
        succeeds if `recorded()` says the sandbox store keeps what it did, and otherwise
        asks to be retried."""
        remaining = deadline - asyncio.get_running_loop().time()
        try:
            await asyncio.wait_for(self._status.written(pod_key), max(remaining, WRITE_GRACE))
        except TimeoutError:
            late = f"pod {pod_key}: status not written to the API within {self.add_timeout:g}s"
            if not recorded():
                raise CniError(ErrorCode.TRY_AGAIN_LATER, late) from None
            log.warning(
                "%s; answered all the same: the write goes on, and the sandbox store keeps "
                "it over a restart",
                late,
            )

    async def _wait_links(self, pod_key: str, deadline: float) -> None:
        """Until the pod's links converged (see `_progress`), looking again at each health
        write that touches the pod; past the deadline, a CniError asking for a retry."""
        loop = asyncio.get_running_loop()
        touched = asyncio.Event()

        def told(pods: Iterable[str], errors: bool) -> None:
            touched.set()

        stop = self.links.watch_health(told, pod_key)
        try:
            while True:
                touched.clear()
                converging, errors = self._progress(pod_key)
                if not converging:
                    if errors:
                        log.warning("pod %s added; links that cannot be built: %s", pod_key, errors)
                    return
                if loop.time() >= deadline:
                    raise self._not_realised(pod_key, errors)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(touched.wait(), deadline - loop.time())
        finally:
            stop()

    def _not_realised(self, pod_key: str, errors: list[str]) -> CniError:
        if self.links.findings(pod_key).waiting_for_slot:
            namespace = pod_key.partition("/")[0]
            errors = [*errors, f"links across nodes wait for namespace {namespace}'s ids"]
        return CniError(
            ErrorCode.TRY_AGAIN_LATER,
            f"pod {pod_key}: links not realised within {self.add_timeout:g}s"
            + (f": {'; '.join(errors)}" if errors else ""),
        )
