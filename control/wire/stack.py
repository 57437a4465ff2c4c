"""The gRPC wire's control side, assembled: manager, workers, handshakes, Peer service.

Every daemon builds one: it carries a grpc node's cross-node links, and on every
node the links under emulation (impairments or a cable state):

    grpc driver ──attach/detach──▶ manager ──changed──▶ worker pool ──fds──▶ workers
                                     ▲  │ nodes queue
                 Peer service ───────┘  └──▶ handshake loop ──RPC──▶ peer nodes

With `auth.enabled` (the default) both services authenticate both ends: the
Peer service and its client run on mutual TLS with this node's certificate
(control/auth/), the workers' streams open with the HMAC preface on
`auth.wire_key` (dataplane/preface.py). Credentials that cannot be read fail
the construction with a CredentialError naming the config key, unless the
stack is built `local_only` (a vxlan node without them, see `WireStack.local`).

Local only, the stack carries same-node links under emulation (TAP to TAP in
one worker: no stream, no peer RPC) and nothing else: no Peer service, no
handshakes; a cross-node grpc row fails its update with a SpecError naming the
credential that is missing (retried when the row changes), before any TAP is
made. Its workers still listen on their data ports, but open every
connection with the preface on a random key that only this stack holds (a
private file removed at `close`; with `dataplane.run_dir`, one kept there for
the next daemon, which adopts the workers), so no stream of anyone is accepted.

Start order: the workers, then the Peer service (peers' handshakes are
answered `pending` until this node's ends exist), then the handshake loop.
`close` stops them in reverse and never removes a TAP: they are persistent,
and a restarted daemon attaches to them again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import tempfile
from typing import Any

from meshwire.base import hostport
from meshwire.control.auth.certs import CredentialError
from meshwire.control.auth.tls import NodeCredentials, check_wire_key
from meshwire.control.common.config import Config
from meshwire.control.common.listening import StartWaits, start_patiently
from meshwire.control.common.queue import WorkQueue
from meshwire.control.common.retries import ExponentialBackoff
from meshwire.control.links import podend
from meshwire.control.links.driver_errors import SpecError
from meshwire.control.links.iface_names import Mark
from meshwire.control.links.netns import CURRENT
from meshwire.control.tables.links import LinkKind, LinkRow, LinksTable
from meshwire.control.wire.grpc_driver import GrpcDriver
from meshwire.control.wire.handshake import Handshaker
from meshwire.control.wire.manager import Desired, WireManager
from meshwire.control.wire.peer_client import GrpcPeerClient
from meshwire.control.wire.peer_service import start_peer_server
from meshwire.control.wire.supervisor import PoolSettings, WorkerPool
from meshwire.control.wire.thread_ends import ThreadEnds
from meshwire.control.wire.types import WireEnds
from meshwire.dataplane import preface
from meshwire.dataplane.handle import WorkerError
from meshwire.dataplane.messages import AddWire

# The Peer service stops within this grace (in-flight handshakes finish).
SERVER_GRACE = 0.5
# A local-only stack's wire key file in `dataplane.run_dir`.
LOCAL_WIRE_KEY = "local-wire.key"


def worker_count(config: Config) -> int:
    return config.workers or os.cpu_count() or 1


class WireStack:
    def __init__(self, config: Config, links: LinksTable, local_only: bool = False) -> None:
        """`links`: the table whose rows' handshake problems the manager writes.
        `local_only`: credentials that cannot be read make a local-only stack
        (`missing` says why) instead of raising CredentialError."""
        self.config = config
        self.credentials: NodeCredentials | None = None
        # Why this stack carries same-node links only (the CredentialError's text), or "".
        self.missing = ""
        self._private_key = ""
        wire_key = ""
        if config.auth.enabled:
            try:
                check_wire_key(config.auth)
                self.credentials = NodeCredentials(config.auth, config.node_name, config.node_ip)
                wire_key = config.auth.wire_key
            except CredentialError as exc:
                if not local_only:
                    raise
                self.missing = str(exc)
                if config.dataplane.run_dir:
                    # Kept for the next daemon: its workers' config must not change.
                    wire_key = _kept_wire_key(config.dataplane.run_dir)
                else:
                    wire_key = self._private_key = _private_wire_key()
        # Peer calls refused as unauthenticated (the workers count the wire's).
        self.refusals = preface.Refusals()
        nodes = WorkQueue(
            debounce=config.reconcile.debounce,
            limiter=ExponentialBackoff(config.reconcile.backoff_min, config.reconcile.backoff_max),
        )
        self.pool = WorkerPool(
            PoolSettings(
                count=worker_count(config),
                listen_host=config.node_ip,
                port_base=config.dataplane.port_base,
                batch_frames=config.dataplane.batch_frames,
                log_level=config.log.level,
                log_format=config.log.format,
                node=config.node_name,
                wire_key=wire_key,
                wire_encrypt=config.auth.wire_encrypt,
                preface_timeout=config.auth.wire_preface_timeout,
                run_dir=config.dataplane.run_dir,
                cgroup_root=config.dataplane.cgroup_root,
                cgroup=config.dataplane.worker_cgroup,
                orphan_grace=config.dataplane.orphan_grace,
            ),
            desired=self._desired,
            adopted=self._adopted,
        )
        self.manager = WireManager(
            config.node_ip,
            config.dataplane.offloads,
            self.pool,
            nodes,
            links,
            pod_carrier=_pod_carrier,
        )
        peer_port = hostport.split(config.peer.listen)[1]
        self.client = GrpcPeerClient(peer_port, config.peer.rpc_timeout, self.credentials)
        self.handshaker = Handshaker(self.manager, self.client, config.node_name)
        self.ends = ThreadEnds(self.manager)
        self.driver = (
            _SameNodeOnly(self.ends, config.dataplane.offloads, config.node_ip, self.missing)
            if self.missing
            else GrpcDriver(self.ends, offloads=config.dataplane.offloads)
        )
        self.started = False
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None

    @property
    def local(self) -> bool:
        """Whether this stack carries same-node links only (credentials missing)."""
        return bool(self.missing)

    def _desired(self, wire_id: int) -> Desired | None:
        return self.manager.desired(wire_id)

    def _adopted(self, command: AddWire, fd: int) -> int | None:
        return self.manager.adopt(command, fd)

    async def adopt(self) -> None:
        """Take over the workers a previous daemon left running (with `dataplane.run_dir`),
        with their wires; call after `bind` and before any link is attached."""
        await self.pool.adopt()

    def release_unclaimed(self) -> None:
        """Drop the adopted wires no row claimed; call once every row was reconciled."""
        self.manager.release_unclaimed()

    def bind(self) -> None:
        """Serve the driver on the running event loop (call from it) from now on, before
        `start`: links attached meanwhile wait for the workers and the handshakes."""
        self.ends.bind(asyncio.get_running_loop())

    async def start(self, waits: StartWaits | None = None) -> None:
        """Start the workers, then the Peer service, then the handshakes (after `bind`).

        Ports that are taken are waited for (`listening.py`): StoppedWaiting if
        `waits.stopping` is set meanwhile, ListenError past the patience. `close`
        releases whatever started either way."""
        first = self.config.dataplane.port_base
        last = first + self.pool.settings.count - 1
        ports = f"port {first}" if last == first else f"ports {first}-{last}"
        await start_patiently(
            f"dataplane.port_base {first} (worker {ports} on {self.config.node_ip})",
            self.pool.start,
            errors=(WorkerError,),
            waits=waits,
        )
        if self.local:
            self.started = True
            return
        listen = self.config.peer.listen
        self._server = await start_patiently(
            f"peer.listen {listen}",
            lambda: start_peer_server(listen, self.manager, self.credentials, self.refusals),
            waits=waits,
        )
        self._task = asyncio.create_task(self.handshaker.run(), name="handshakes")
        self.started = True

    async def close(self) -> None:
        """Stop handshakes, the Peer service and the workers; TAPs and their addresses stay."""
        self.manager.nodes.shutdown()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._server is not None:
            await self._server.stop(SERVER_GRACE)
        await self.client.close()
        await self.pool.close()
        self.manager.close()
        if self._private_key:
            with contextlib.suppress(OSError):
                os.unlink(self._private_key)


def _kept_wire_key(run_dir: str) -> str:
    """The local-only wire key file in the workers' run directory, made once, this
    user's only: its path."""
    os.makedirs(run_dir, mode=0o700, exist_ok=True)
    path = os.path.join(run_dir, LOCAL_WIRE_KEY)
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
    return path


def _private_wire_key() -> str:
    """A wire key file of a fresh random key, readable by this user only: its path."""
    fd, path = tempfile.mkstemp(prefix="meshwire-local-wire-", suffix=".key")
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return path


class _SameNodeOnly(GrpcDriver):
    """The grpc driver of a local-only stack: a row whose far end is on another node
    is refused, before any TAP is made, with a SpecError saying what is missing."""

    def __init__(self, wires: WireEnds, offloads: bool, node_ip: str, missing: str) -> None:
        super().__init__(wires, offloads=offloads)
        self._node_ip = node_ip
        self._missing = missing

    def update(self, row: LinkRow) -> None:
        if row.peer_node_ip != self._node_ip:
            # A wire held for the row's earlier, same-node state goes (its TAP stays).
            self._wires.detach(row.key)
            raise SpecError(
                f"{row.namespace}/{row.uid}",
                row.local.netns,
                row.local.intf,
                f"an emulated link to another node ({row.peer_node_ip}) needs the cluster "
                f"credentials, which this node could not read at start: {self._missing}",
            )
        super().update(row)


def _pod_carrier(row: LinkRow, on: bool) -> None:
    """Carrier for the row's pod end, whose node side is in the daemon's own netns."""
    podend.give_carrier(CURRENT, Mark(row.namespace, row.uid), row.local, LinkKind.GRPC, on)
