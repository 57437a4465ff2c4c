"""The node daemon's control process: wires informer, tables, reconcilers and endpoints.

    informer ─▶ topologies ─▶ desired links ─▶ links table ─▶ link reconciler ─▶ drivers
        ▲            └▶ slot keeper ─▶┘ (id slots)    ▲ health   │ verdicts  (grpc rows)
        │                                            ├──────────┘   wire manager
        │                                            └─ handshake problems ─┘
        └── status writer ◀── plumbing_error ◀── links table's health watchers
                          ◀── link_rebuilds ◀── desired links (a change of emulation)
    slot keeper ◀─▶ IdAllocation object in the API (claims and frees namespace slots)
    CNI endpoint ─▶ topologies (placement) ; /healthz /readyz /metrics
    grpc rows: driver ─▶ wire stack (manager, workers, handshakes, Peer service)

Start-up order makes pruning safe: the links table is marked initialized only
after the informer's first list has been applied and the id slots read
(cross-node links need them), and derived, and pruning
waits for every row of that moment to be attempted once.

Its listen ports (metrics, and the wire's workers and Peer service) are
opened beside the rest and waited for while something else holds them
(`listening.py`): meanwhile the CNI endpoint serves and every link but the
grpc ones is built, and grpc links wait for the wire. A stop during that wait
releases what had started; a port still taken past the patience stops the
daemon with a ListenError.

Before any link is attached, the wire stack adopts the dataplane workers a
previous daemon left running (`dataplane.run_dir`), so their links go on
carrying frames through the restart; what the initial reconciliation did not
claim of them is dropped.

Shutdown stops intake (CNI endpoint, informer), lets in-flight link
operations finish, flushes status writes for a bounded time, and never tears
links down: they keep carrying traffic while the daemon is away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes.aio.client import ApiClient

from meshwire.control.auth import token as tokens
from meshwire.control.cni.endpoint import CniEndpoint
from meshwire.control.common import heap
from meshwire.control.common.config import Config, ConfigError
from meshwire.control.common.listening import StartWaits, StoppedWaiting, start_patiently
from meshwire.control.common.queue import WorkQueue
from meshwire.control.common.retries import ExponentialBackoff
from meshwire.control.common.waits import first
from meshwire.control.daemon import reserved_ports
from meshwire.control.daemon.cni_handler import DaemonCniHandler
from meshwire.control.daemon.http import HealthServer
from meshwire.control.daemon.link_counters import CountersCache
from meshwire.control.daemon.link_report import link_report
from meshwire.control.daemon.metrics import Metrics, StateView, informer_counts
from meshwire.control.daemon.netns_guard import GuardedDriver
from meshwire.control.daemon.node_watch import NodeWatch
from meshwire.control.daemon.placements import PlacementKeeper
from meshwire.control.daemon.plumbing_error import PlumbingErrors
from meshwire.control.daemon.sandbox_store import SandboxStore
from meshwire.control.daemon.slot_keeper import SlotKeeper
from meshwire.control.daemon.uninstall_watch import UninstallWatch
from meshwire.control.informer.client import make_api_client
from meshwire.control.informer.informer import Informer, InformerOptions
from meshwire.control.links.aside import Reaper
from meshwire.control.links.driver import Drivers, kernel_drivers
from meshwire.control.reconcile.derive import NO_CLUSTER, NodeView
from meshwire.control.reconcile.desired import DesiredLinks
from meshwire.control.reconcile.prune import prune
from meshwire.control.reconcile.reconciler import NODE_NETNS, LinkReconciler
from meshwire.control.reconcile.status_writer import KubeStatusApi, StatusWriter
from meshwire.control.tables.links import LinkKind, LinksTable, new_links_table
from meshwire.control.tables.topologies import TopologyTable
from meshwire.control.wire.metrics import WireCollector
from meshwire.control.wire.stack import WireStack

log = logging.getLogger(__name__)

# Shutdown waits this long for status writes to reach the API.
FLUSH_GRACE = 3.0
# How `failure.describe` starts for a call the API server refused to authenticate
# or authorize.
DENIED = ("401 ", "403 ")


@dataclass(frozen=True, slots=True)
class _Parts:
    """What `Daemon._connect` builds around the API client, for `_serve` to run."""

    informer: Informer
    placements: PlacementKeeper
    endpoint: CniEndpoint
    health: HealthServer


class Daemon:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.node = NodeView(
            node_ip=config.node_ip,
            inter_node_link_type=config.inter_node_link_type,
            mtu=config.mtu,
            vni_base=config.vxlan.vni_base,
        )
        self.topologies = TopologyTable()
        self.links = new_links_table()
        self.slots = SlotKeeper(
            self.topologies,
            vni_base=config.vxlan.vni_base,
            on_change=self._slots_changed,
            namespace=config.api.namespace,
            request_timeout=config.api.request_timeout,
            watch_timeout=config.api.watch_timeout,
        )
        # Deployed by deploy/: the links to a node removed from the cluster lose carrier.
        self.nodes = (
            NodeWatch(
                config.node_ip,
                self._nodes_changed,
                node_name=config.node_name,
                link_type=config.inter_node_link_type,
                request_timeout=config.api.request_timeout,
                watch_timeout=config.api.watch_timeout,
            )
            if config.api.follow_nodes
            else None
        )
        cluster = self.nodes if self.nodes is not None else NO_CLUSTER
        self.desired = DesiredLinks(
            self.topologies, self.links, self.node, self.slots, cluster=cluster
        )
        # Every node runs the wire stack: besides a grpc node's cross-node links, every
        # link under emulation (impairments or a cable state) is a grpc row.
        self.wire = _wire_stack(config, self.links)
        self.reaper = Reaper()
        drivers = kernel_drivers(vxlan_port=config.vxlan.port, reaper=self.reaper)
        drivers[LinkKind.GRPC] = self.wire.driver
        self.metrics = Metrics()
        # Acts only in namespaces this node's CNI handed it; the placement keeper
        # vouches for them once `_connect` made it.
        self.driver = GuardedDriver(
            Drivers(drivers), lambda action: self.metrics.netns_refused.labels(action).inc()
        )
        backoff = ExponentialBackoff(config.reconcile.backoff_min, config.reconcile.backoff_max)
        self.queue = WorkQueue(debounce=config.reconcile.debounce, limiter=backoff)
        self.reconciler = LinkReconciler(
            self.links,
            self.driver,
            self.queue,
            on_duration=self.metrics.observe_reconcile,
        )
        self._waits = StartWaits()
        self._counters = CountersCache(config.metrics.counters_interval)
        self._metrics_token = _metrics_token(config)
        cni = config.cni
        # Deployed by deploy/: once meshwire's namespace goes, hold every link and
        # take the shim out of the chain (uninstall_watch.py).
        self.uninstall = (
            UninstallWatch(
                cni.deployment_namespace,
                cni.conf_dir,
                self.reconciler.hold,
                request_timeout=config.api.request_timeout,
                watch_timeout=config.api.watch_timeout,
            )
            if cni.deployment_namespace and cni.conf_dir
            else None
        )
        # Why the informer's last list or watch failed ("" when none did).
        self._sync_error: Callable[[], str] = lambda: ""
        # Why the last status write was refused (401/403), "" once one lands.
        self._write_denied: Callable[[], str] = lambda: ""

    # -- readiness --------------------------------------------------------------

    def not_ready(self) -> str:
        if self._waits.waiting_for:
            return f"waiting for {self._waits.waiting_for}"
        if not self.topologies.initialized:
            error = self._sync_error()
            return f"topologies not synced: {error}" if error else "topologies not synced"
        # Refused credentials or permissions stay refused until someone fixes
        # them: a synced daemon that can no longer watch, or write status, says so.
        error = self._sync_error()
        if error.startswith(DENIED):
            return f"topologies: {error}"
        if denied := self._write_denied():
            return f"status writes: {denied}"
        if not self.slots.synced.is_set():
            error = self.slots.last_error
            return f"id slots not read: {error}" if error else "id slots not read"
        if self.uninstall is not None and not self.uninstall.checked.is_set():
            error = self.uninstall.last_error
            namespace = f"namespace {self.uninstall.namespace} not read"
            return f"{namespace}: {error}" if error else namespace
        if not self.reconciler.initial_done.is_set():
            return "initial reconciliation not complete"
        if not self.wire.started:
            return "dataplane workers not started"
        return ""

    def stop(self) -> None:
        self._waits.stopping.set()

    # -- run ------------------------------------------------------------------

    async def run(self) -> None:
        """Connect to the API, build what talks to it, serve until stopped; links stay."""
        api = await make_api_client(
            self.config.api.url, self.config.api.kubeconfig, self.config.api.token_file
        )
        try:
            await self._serve(api, self._connect(api))
        finally:
            await api.close()  # type: ignore[no-untyped-call]

    def _connect(self, api: ApiClient) -> _Parts:
        """The parts that need the API client: status writer, informer, placements, the
        CNI endpoint and the health server; readiness and metrics read them."""
        self.status = StatusWriter(
            KubeStatusApi(api, self.config.api.request_timeout),
            rate=self.config.reconcile.status_rate,
            listener=self.topologies,
        )
        informer = Informer(
            api,
            self.topologies,
            InformerOptions(
                namespace=self.config.api.namespace,
                request_timeout=self.config.api.request_timeout,
                watch_timeout=self.config.api.watch_timeout,
            ),
        )
        self._sync_error = lambda: informer.stats.last_error
        status = self.status
        self.plumbing = PlumbingErrors(
            self.config.node_ip,
            self.topologies,
            self.links,
            self.desired.rebuilds,
            self.status.set,
        )
        self._write_denied = lambda: status.denied
        self.slots.view_healthy = lambda: not informer.stats.last_error
        self.metrics.attach(
            StateView(
                queue_depth=lambda: self.queue.depth,
                links=self.links.with_health,
                topologies=lambda: len(self.topologies),
                informer_counts=lambda: informer_counts(informer.stats),
                synced=lambda: self.topologies.initialized,
                initial_done=self.reconciler.initial_done.is_set,
            )
        )
        placements = PlacementKeeper(
            self.config.node_ip,
            self.topologies,
            self.status.set,
            SandboxStore(Path(self.config.cni.state_dir)),
        )
        self.driver.authority = placements
        handler = DaemonCniHandler(
            self.config.node_ip,
            self.topologies,
            self.desired,
            self.reconciler,
            self.status,
            self.config.cni.add_timeout,
            self.not_ready,
            placements,
        )
        return _Parts(
            informer,
            placements,
            CniEndpoint(self.config.cni.socket, handler),
            HealthServer(
                self.config.metrics.listen,
                self.metrics.registry,
                self.not_ready,
                self._link_report,
                self._placement,
                self._metrics_token,
            ),
        )

    async def _serve(self, api: ApiClient, parts: _Parts) -> None:
        """Start every loop, wait for the stop (or a loop that ends), then stop them in
        order: no link is torn down, status writes get FLUSH_GRACE to land, and so
        do the deletions of interfaces set aside (links/aside.py)."""
        if self.config.reserve_ports:
            # In this thread: /proc/sys/net is the namespace of the thread that opens it.
            reserved_ports.reserve(reserved_ports.listen_ports(self.config))
        # The ports are opened (and waited for, should one be taken) beside the rest:
        # the CNI endpoint and every link but grpc ones work meanwhile.
        self.wire.bind()
        # Before any link is attached: the workers a previous daemon left carry on.
        await self.wire.adopt()
        listening = asyncio.create_task(self._listen(parts.health), name="listen")
        await parts.endpoint.start()
        self.status.start()
        tasks = [
            asyncio.create_task(parts.informer.run(), name="informer"),
            asyncio.create_task(self.slots.run(api), name="slots"),
            asyncio.create_task(self._derive_loop(parts.placements), name="derive"),
            asyncio.create_task(self._reconcile(), name="reconciler"),
            asyncio.create_task(self._full_pass_loop(), name="full-pass"),
            asyncio.create_task(self.plumbing.run(), name="plumbing-error"),
            asyncio.create_task(parts.placements.run(), name="placements"),
        ]
        if self.uninstall is not None:
            tasks.append(asyncio.create_task(self.uninstall.run(api), name="uninstall-watch"))
        if self.nodes is not None:
            # Its annotation written once every link is built or adopted as it said.
            node_watch = self.nodes.run(api, ready=self.reconciler.initial_done)
            tasks.append(asyncio.create_task(node_watch, name="node-watch"))
        log.info(
            "meshwire daemon on node %s (%s) started; CNI socket %s, metrics %s",
            self.config.node_name,
            self.config.node_ip,
            self.config.cni.socket,
            self.config.metrics.listen,
        )
        stopped = asyncio.create_task(self._waits.stopping.wait())
        try:
            await _until_stopped(stopped, listening, tasks)
        finally:
            log.info("meshwire daemon stopping; links stay up")
            # A start still waiting for a port gives up; one spawning workers finishes,
            # so that close() below stops them.
            self._waits.stopping.set()
            await asyncio.gather(listening, return_exceptions=True)
            await parts.endpoint.close()
            self.reconciler.close()
            for task in [stopped, *tasks]:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.wire.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.status.flush(), FLUSH_GRACE)
            # Interfaces set aside go now rather than at the next run's first prune.
            await asyncio.to_thread(self.reaper.flush, FLUSH_GRACE)
            await self.status.close()
            self.desired.close()
            self.plumbing.close()
            parts.placements.close()
            await parts.health.stop()

    async def _reconcile(self) -> None:
        """The reconciler, once the uninstall watch (if any) has found meshwire's namespace."""
        if self.uninstall is not None:
            await self.uninstall.checked.wait()
        await self.reconciler.run()

    async def _link_report(self, state: str, counters: bool) -> list[dict[str, Any]]:
        """`/links`: the rows are taken here, on the loop; counters from the cache."""
        rows = self.links.with_health()
        read = await self._counters.read([r for r, _ in rows]) if counters else None
        return link_report(rows, state, read)

    async def _listen(self, health: HealthServer) -> None:
        """Open the metrics port, then the wire's (workers, Peer service), each waited for."""
        metrics = f"metrics.listen {self.config.metrics.listen}"
        await start_patiently(metrics, health.start, waits=self._waits)
        self.metrics.registry.register(WireCollector(self.wire))
        await self.wire.start(self._waits)

    async def _derive_loop(self, placements: PlacementKeeper) -> None:
        await self.topologies.wait_initialized()
        await self.slots.synced.wait()
        if self.nodes is not None:
            # Which transport each node carries on: derived without it, a restarted
            # daemon would move its links to a transport its peers do not use yet. An
            # API that will not list the Nodes delays the start no longer than this.
            await first(self.nodes.synced.wait(), within=self.config.api.request_timeout)
        placements.start()
        with heap.bulk():
            self.desired.step()
        self.links.mark_initialized()
        log.info(
            "topologies synced: %d objects, %d links for this node",
            len(self.topologies),
            len(self.links),
        )
        while True:
            await self.desired.wait()
            self.desired.step()

    async def _full_pass_loop(self) -> None:
        """Prune once the initial reconcile is done, then re-verify everything periodically."""
        await self.reconciler.initial_done.wait()
        log.info("initial reconciliation complete: %d links", len(self.links))
        self.wire.release_unclaimed()
        while True:
            await self._prune()
            await asyncio.sleep(self.config.reconcile.full_interval)
            self.desired.rederive_all()
            self.reconciler.verify_all()
            self.wire.manager.verify_all()
            self.metrics.full_passes.inc()

    async def _prune(self) -> None:
        namespaces = {
            t.status.net_ns
            for key in self.topologies.on_node(self.config.node_ip)
            if (t := self.topologies.get(key)) is not None and t.status.net_ns
        }
        # And the node's own: node sides, vxlan devices and TAPs no row wants.
        namespaces.add(NODE_NETNS)
        removed = await prune(self.reconciler, self.driver, namespaces)
        if removed:
            self.metrics.pruned.inc(removed)

    def _placement(self, pod_key: str) -> dict[str, Any] | None:
        """`/placement`: the pod's placement as read, and whether derivation is behind."""
        topology = self.topologies.get(pod_key)
        if topology is None:
            return None
        return {
            "src_ip": topology.status.src_ip,
            "net_ns": topology.status.net_ns,
            "deriving": self.desired.pending(),
        }

    def _nodes_changed(self) -> None:
        """Before the first derivation (`_derive_loop`), that one reads the nodes."""
        if self.links.initialized:
            self.desired.rederive_all()

    def _slots_changed(self, namespaces: set[str]) -> None:
        self.desired.rederive_namespaces(namespaces)


def _metrics_token(config: Config) -> str:
    """The token of `metrics.token_file` ("" for none); raises ConfigError naming the key."""
    path = config.metrics.token_file
    if not path:
        return ""
    try:
        return tokens.read(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"metrics.token_file {path}: {exc}") from None


def _wire_stack(config: Config, links: LinksTable) -> WireStack:
    """The wire stack. On a vxlan node whose cluster credentials cannot be read, a
    local-only one: same-node links under emulation work, cross-node ones fail naming
    the config key (a grpc node without them does not start, naming the config key)."""
    if config.inter_node_link_type == "grpc":
        return WireStack(config, links)
    stack = WireStack(config, links, local_only=True)
    if stack.local:
        log.warning(
            "the wire stack runs local only on this vxlan node: %s; links under emulation "
            "(impairments or a cable state) between pods of this node work, those to other "
            "nodes fail until `meshwire certs init`'s Secret is mounted and the daemon "
            "restarted",
            stack.missing,
        )
    return stack


async def _until_stopped(
    stopped: asyncio.Task[Any], listening: asyncio.Task[None], tasks: list[asyncio.Task[None]]
) -> None:
    """Returns on the stop, or when a task ends (none should); raises what a task raised.

    `listening` alone may end first: it has opened the ports, or it stopped waiting
    for one because of the stop (StoppedWaiting). A ListenError from it is raised."""
    watched: set[asyncio.Task[Any]] = {stopped, listening, *tasks}
    while watched:
        done, watched = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is stopped:
                return
            error = task.exception()
            if task is listening and (error is None or isinstance(error, StoppedWaiting)):
                continue
            if error is not None:
                raise error
            return
