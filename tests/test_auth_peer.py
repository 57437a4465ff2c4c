"""The Peer service on mutual TLS (control/auth/): only a node's own certificate speaks for it.

The real server (`start_peer_server`) with node A's credentials on loopback,
over a manager that records what reaches it; callers are stock grpcio clients
with no credentials, a certificate of another CA, node B's certificate
claiming node C, and node B's own. Rotation: new CA files apply to new
connections while a channel already open keeps working.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from meshwire.control.auth import certs
from meshwire.control.auth.certs import CredentialError
from meshwire.control.auth.tls import NodeCredentials
from meshwire.control.common.config import AuthConfig
from meshwire.control.wire.peer_client import GrpcPeerClient
from meshwire.control.wire.peer_service import start_peer_server
from meshwire.control.wire.types import PeerError
from meshwire.dataplane import preface
from meshwire.proto import meshwire_pb2, meshwire_pb2_grpc

A, B, C = ("node-a", "127.0.0.1"), ("node-b", "127.0.0.2"), ("node-c", "127.0.0.3")


class Manager:
    """Records the requests that reach the manager (none may, unless authenticated)."""

    def __init__(self) -> None:
        self.withdrawn_from: list[str] = []

    def withdrawn(self, node_ip: str, wires: Any) -> None:
        self.withdrawn_from.append(node_ip)

    def offered(self, node_ip: str, offloads: bool, wires: Any) -> list[Any]:
        return []


def auth_in(directory: Path) -> AuthConfig:
    certs.init_dir(directory, force=True)
    return AuthConfig(
        ca_cert=str(directory / certs.CA_CERT),
        ca_key=str(directory / certs.CA_KEY),
        wire_key=str(directory / certs.WIRE_KEY),
    )


def delete_request(node: tuple[str, str]) -> meshwire_pb2.DeleteWiresRequest:
    end = meshwire_pb2.WireEnd(namespace="lab", uid=1, pod="r1")
    return meshwire_pb2.DeleteWiresRequest(node=node[0], node_ip=node[1], wires=[end])


async def call(channel: Any, node: tuple[str, str]) -> grpc.StatusCode:
    stub = meshwire_pb2_grpc.PeerStub(channel)  # type: ignore[no-untyped-call]
    try:
        await stub.DeleteWires(delete_request(node), timeout=10)
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    finally:
        await channel.close()
    return grpc.StatusCode.OK


@dataclass
class Node:
    """Node A serving the Peer service; what reaches its manager; its refusals."""

    auth: AuthConfig
    credentials: NodeCredentials
    manager: Manager = field(default_factory=Manager)
    refusals: preface.Refusals = field(default_factory=preface.Refusals)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[tuple[Node, int]]:
    auth = auth_in(tmp_path / "cluster")
    node = Node(auth, NodeCredentials(auth, *A))
    port = free_port()
    server = await start_peer_server(
        f"127.0.0.1:{port}",
        node.manager,  # type: ignore[arg-type]
        node.credentials,
        node.refusals,
    )
    try:
        yield node, port
    finally:
        await server.stop(None)


async def test_a_client_without_credentials_is_refused(tmp_path: Path) -> None:
    async with serving(tmp_path) as (node, port):
        assert await call(grpc.aio.insecure_channel(f"127.0.0.1:{port}"), B) == (
            grpc.StatusCode.UNAVAILABLE
        )
        roots_only = grpc.ssl_channel_credentials(node.credentials.issued.roots)
        channel = grpc.aio.secure_channel(f"127.0.0.1:{port}", roots_only)
        assert await call(channel, B) == grpc.StatusCode.UNAVAILABLE
        assert node.manager.withdrawn_from == []


async def test_a_certificate_of_another_ca_is_refused(tmp_path: Path) -> None:
    async with serving(tmp_path) as (node, port):
        stranger = NodeCredentials(auth_in(tmp_path / "elsewhere"), *B)
        channel = grpc.aio.secure_channel(f"127.0.0.1:{port}", stranger.channel_credentials())
        assert await call(channel, B) == grpc.StatusCode.UNAVAILABLE
        assert node.manager.withdrawn_from == []


async def test_a_node_claiming_another_is_refused_counted_and_logged_with_its_address(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with serving(tmp_path) as (node, port):
        b = NodeCredentials(node.auth, *B)
        for claimed in (C, ("node-b", C[1]), ("node-c", B[1])):
            channel = grpc.aio.secure_channel(f"127.0.0.1:{port}", b.channel_credentials())
            assert await call(channel, claimed) == grpc.StatusCode.UNAUTHENTICATED
        assert node.manager.withdrawn_from == []
        assert node.refusals.count == 3
        refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        # Once per address (rate-limited), naming it and the claim.
        assert len(refusals) == 1
        assert "peer service: refused a connection from 127.0.0.1" in refusals[0]
        assert "node_ip 127.0.0.3" in refusals[0]
        # Its own name and address pass.
        channel = grpc.aio.secure_channel(f"127.0.0.1:{port}", b.channel_credentials())
        assert await call(channel, B) == grpc.StatusCode.OK
        assert node.manager.withdrawn_from == [B[1]]


async def test_the_peer_client_calls_a_node_as_itself(tmp_path: Path) -> None:
    async with serving(tmp_path) as (node, port):
        client = GrpcPeerClient(port, 10, NodeCredentials(node.auth, *B))
        try:
            await client.delete_wires(A[1], delete_request(B))
            assert node.manager.withdrawn_from == [B[1]]
            # A peer whose certificate does not name the address called is not trusted.
            with pytest.raises(PeerError, match="UNAVAILABLE"):
                await client.delete_wires("127.0.0.4", delete_request(B))
        finally:
            await client.close()


async def test_new_ca_files_apply_to_new_connections_and_open_ones_keep_working(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path) as (node, port):
        old_b = NodeCredentials(node.auth, *B)
        kept = grpc.aio.secure_channel(f"127.0.0.1:{port}", old_b.channel_credentials())
        stub = meshwire_pb2_grpc.PeerStub(kept)  # type: ignore[no-untyped-call]
        await stub.DeleteWires(delete_request(B), timeout=10)
        # A new CA replaces the old in the files node A reads.
        new = auth_in(tmp_path / "new")
        for source, target in ((new.ca_cert, node.auth.ca_cert), (new.ca_key, node.auth.ca_key)):
            shutil.copyfile(source, target + ".tmp")
            os.replace(target + ".tmp", target)
        new_b = NodeCredentials(new, *B)
        channel = grpc.aio.secure_channel(f"127.0.0.1:{port}", new_b.channel_credentials())
        assert await call(channel, B) == grpc.StatusCode.OK
        assert node.credentials.generation == 1
        # The old CA is no longer trusted for new connections...
        stale = grpc.aio.secure_channel(f"127.0.0.1:{port}", old_b.channel_credentials())
        assert await call(stale, B) == grpc.StatusCode.UNAVAILABLE
        # ...and the connection made before the change still works.
        await stub.DeleteWires(delete_request(B), timeout=10)
        await kept.close()
        assert node.manager.withdrawn_from == [B[1]] * 3


def test_missing_or_mismatched_files_are_errors_naming_the_config_key(tmp_path: Path) -> None:
    auth = auth_in(tmp_path / "cluster")
    other = auth_in(tmp_path / "other")
    for broken, key in (
        (auth.model_copy(update={"ca_cert": str(tmp_path / "none.crt")}), "auth.ca_cert"),
        (auth.model_copy(update={"ca_key": str(tmp_path / "none.key")}), "auth.ca_key"),
        (auth.model_copy(update={"ca_key": other.ca_key}), "auth.ca_key"),
        (auth.model_copy(update={"ca_cert": auth.wire_key}), "auth.ca_cert"),
    ):
        with pytest.raises(CredentialError, match=key):
            NodeCredentials(broken, *A)


def test_a_grpc_daemon_without_its_credentials_exits_naming_the_config_key(
    tmp_path: Path,
) -> None:
    argv = [sys.executable, "-m", "meshwire.tools.cli", "daemon"]
    for key, value in {
        "node_ip": "127.0.0.1",
        "inter_node_link_type": "grpc",
        "auth.ca_cert": str(tmp_path / "missing" / "ca.crt"),
        "auth.wire_key": str(auth_in(tmp_path / "c").wire_key),
        "cni.socket": str(tmp_path / "cni.sock"),
        "reserve_ports": "false",
    }.items():
        argv += ["--set", f"{key}={value}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert f"auth.ca_cert: {tmp_path}/missing/ca.crt: No such file" in done.stderr
    assert "meshwire certs init" in done.stderr
