"""The Peer service this node serves (`peer.listen`): other nodes' handshakes.

It checks each request for what no well-behaved peer sends (a caller address
that is not an IP, a name too long to be a Kubernetes name, a uid or port out
of range) and refuses the whole call with INVALID_ARGUMENT naming the field;
everything else is the manager's to judge, wire by wire. Nothing in a request
is ever used as a path: wires are named by (namespace, uid, pod) only.

With credentials (config `auth`), the service runs on mutual TLS: a caller
without a certificate from the cluster CA fails the TLS handshake, and a
caller whose certificate does not name the `node` and `node_ip` its request
claims is refused with UNAUTHENTICATED, counted and logged (once per address
a minute), before anything of its request is used.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import grpc

from meshwire.base import hostport
from meshwire.control.auth.tls import NodeCredentials, identity_problem
from meshwire.control.common.ids import UID_LIMIT
from meshwire.control.wire.manager import WireManager
from meshwire.dataplane import preface, tcp
from meshwire.proto import meshwire_pb2, meshwire_pb2_grpc

# Kubernetes names (namespaces, pods) are at most 253 bytes.
MAX_NAME = 253


def request_problem(
    node_ip: str,
    ends: list[tuple[str, Any]],
    ports: list[int],
    names: list[tuple[str, str]] | None = None,
) -> str:
    """Why a request is unusable ("" if it is not); `ends` are (field, WireEnd-like),
    `names` are (field, value) of further Kubernetes names."""
    try:
        ipaddress.ip_address(node_ip)
    except ValueError:
        return f"node_ip: {node_ip!r} is not an IP address"
    for field, end in ends:
        for name in ("namespace", "pod"):
            problem = _name_problem(f"{field}.{name}", getattr(end, name))
            if problem:
                return problem
        if not 0 < end.uid < UID_LIMIT:
            return f"{field}.uid: {end.uid} is outside 1..{UID_LIMIT - 1}"
    for field, value in names or []:
        problem = _name_problem(field, value)
        if problem:
            return problem
    for i, port in enumerate(ports):
        if not 0 < port < 65536:
            return f"wires[{i}].data_port: {port} is not a port"
    return ""


def _name_problem(field: str, value: str) -> str:
    if not value or len(value.encode()) > MAX_NAME:
        return f"{field}: {value!r} is not a Kubernetes name"
    return ""


def _caller(context: Any) -> str:
    """The caller's address without its port ("ipv4:10.0.0.5:41234" -> "10.0.0.5")."""
    peer = str(context.peer() or "an unknown peer")
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        host = rest.rpartition(":")[0]
        return host.strip("[]") or rest
    return peer


class PeerService(meshwire_pb2_grpc.PeerServicer):
    def __init__(
        self,
        manager: WireManager,
        authenticated: bool = False,
        refusals: preface.Refusals | None = None,
    ) -> None:
        """`authenticated`: the server runs on mutual TLS, and each caller's certificate
        must name the node it claims to be."""
        self._manager = manager
        self._authenticated = authenticated
        self.refusals = refusals or preface.Refusals()

    async def _check_caller(self, context: Any, node: str, node_ip: str) -> None:
        if not self._authenticated:
            return
        problem = identity_problem(context.auth_context(), node, node_ip)
        if problem:
            self.refusals.refused("peer service", _caller(context), problem)
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, problem)

    async def CreateWires(
        self, request: meshwire_pb2.CreateWiresRequest, context: Any
    ) -> meshwire_pb2.CreateWiresReply:
        await self._check_caller(context, request.node, request.node_ip)
        offers = list(enumerate(request.wires))
        problem = request_problem(
            request.node_ip,
            [(f"wires[{i}].local", offer.local) for i, offer in offers],
            [offer.data_port for offer in request.wires],
            [(f"wires[{i}].peer_pod", offer.peer_pod) for i, offer in offers],
        )
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        answers = self._manager.offered(request.node_ip, request.offloads, request.wires)
        return meshwire_pb2.CreateWiresReply(wires=answers)

    async def DeleteWires(
        self, request: meshwire_pb2.DeleteWiresRequest, context: Any
    ) -> meshwire_pb2.DeleteWiresReply:
        await self._check_caller(context, request.node, request.node_ip)
        ends = [(f"wires[{i}]", end) for i, end in enumerate(request.wires)]
        problem = request_problem(request.node_ip, ends, [])
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        self._manager.withdrawn(request.node_ip, request.wires)
        return meshwire_pb2.DeleteWiresReply(
            wires=[meshwire_pb2.WireAnswer(end=end) for end in request.wires]
        )


async def start_peer_server(
    listen: str,
    manager: WireManager,
    credentials: NodeCredentials | None = None,
    refusals: preface.Refusals | None = None,
) -> Any:
    """A started grpc.aio server for the Peer service on `listen` (HOST:PORT), on mutual
    TLS with `credentials`, in the clear without.

    An empty HOST is every address, as gRPC's "[::]" is: IPv6 and IPv4 both.
    """
    server: Any = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    service = PeerService(manager, credentials is not None, refusals)
    meshwire_pb2_grpc.add_PeerServicer_to_server(service, server)  # type: ignore[no-untyped-call]
    host, port = hostport.split(listen)
    address = hostport.join(host or "::", port)
    try:
        if credentials is not None:
            bound = server.add_secure_port(address, credentials.server_credentials())
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError:
        bound = 0
    if bound == 0:
        await server.stop(None)
        raise OSError(f"cannot bind {address}: {_bind_error(host or '::', port)}")
    await server.start()
    return server


def _bind_error(host: str, port: int) -> str:
    """Why binding host:port fails now, in the kernel's words ("Address already in use"):
    gRPC's own error only says that it failed."""
    try:
        with socket.socket(tcp.family(host), socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        return exc.strerror or str(exc)
    return "gRPC could not bind it, though the address is free now"
