"""The Peer service this node serves (`peer.listen`): other nodes' handshakes.

It checks each request for what no well-behaved peer sends (a caller address
that is not an IP, a name too long to be a Kubernetes name, a uid or port out
of range) and refuses the whole call with INVALID_ARGUMENT naming the field;
everything else is the manager's to judge, wire by wire. Nothing in a request
is ever used as a path: wires are named by (namespace, uid, pod) only.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import grpc

from meshwire.control.reconcile.ids import UID_LIMIT
from meshwire.control.wire.manager import WireManager
from meshwire.dataplane import hostport, tcp
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


class PeerService(meshwire_pb2_grpc.PeerServicer):
    def __init__(self, manager: WireManager) -> None:
        self._manager = manager

    async def CreateWires(
        self, request: meshwire_pb2.CreateWiresRequest, context: Any
    ) -> meshwire_pb2.CreateWiresReply:
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
        ends = [(f"wires[{i}]", end) for i, end in enumerate(request.wires)]
        problem = request_problem(request.node_ip, ends, [])
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        self._manager.withdrawn(request.node_ip, request.wires)
        return meshwire_pb2.DeleteWiresReply(
            wires=[meshwire_pb2.WireAnswer(end=end) for end in request.wires]
        )


async def start_peer_server(listen: str, manager: WireManager) -> Any:
    """A started grpc.aio server for the Peer service on `listen` (HOST:PORT).

    An empty HOST is every address, as gRPC's "[::]" is: IPv6 and IPv4 both.
    """
    server: Any = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    meshwire_pb2_grpc.add_PeerServicer_to_server(PeerService(manager), server)  # type: ignore[no-untyped-call]
    host, port = hostport.split(listen)
    address = hostport.join(host or "::", port)
    try:
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
