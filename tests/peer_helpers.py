"""A node's Peer service run for real, in a network namespace of the test's own (root).

The test builds requests and asserts on what comes back; the calls themselves run
in a child process that `ip netns exec` starts in the test's `mwt<hex>` netns
(lo up): the real `start_peer_server` over a real `WireManager` that holds one
wire, and the real `GrpcPeerClient`, talking over that netns's loopback. The child
is in the netns from its first instruction, so every socket gRPC opens, from
whichever of its threads, is there: the host loopback is never used. It reports
the wire's state before the calls, then each call's reply or error and the
wire's state after it.

This node (THIS_NODE) runs pod r2, whose end of link lab/3 is the wire; the far
end is pod r1 on PEER_NODE. The wire's TAP is one end of a pipe (setting carrier
fails harmlessly on it). The service is also reachable on SLOW_PORT, through a
proxy that makes each new connection wait SLOW_DELAY seconds, and on the
netns's IPv6 loopback on PEER6_PORT, configured as `peer.listen` writes it
(`[::1]:PORT`), and on every address on ANY_PORT (`:PORT`).

Run as a script, this file is that child: `peer_helpers.py CALLS_JSON OUT_JSON`.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from slot_helpers import slot

from meshwire.control.common.ids import wire_id
from meshwire.control.common.queue import WorkQueue
from meshwire.control.tables.links import End, LinkKind, LinkRow, new_links_table
from meshwire.control.wire.manager import WireManager
from meshwire.control.wire.peer_client import GrpcPeerClient
from meshwire.control.wire.peer_service import start_peer_server
from meshwire.control.wire.types import PeerError, TapRef
from meshwire.proto import meshwire_pb2

THIS_NODE = "192.0.2.2"
PEER_NODE = "192.0.2.1"
# The Peer service's port on the netns's loopback (free: the netns is the test's).
PEER_PORT = 50051
# A port nothing listens on there.
CLOSED_PORT = 50099
# The Peer service again, behind a proxy that holds each new connection SLOW_DELAY
# seconds before passing it on: a slow underlay or a busy peer node.
SLOW_PORT = 50052
SLOW_DELAY = 0.5
# The Peer service once more, on the IPv6 loopback.
PEER6_PORT = 50053
# And on every address, IPv4 and IPv6.
ANY_PORT = 50054
# The data port of the worker owning the wire on this node.
DATA_PORT = 7002
# Per-RPC timeout of the client; the child gives up on a call 10 s after it.
RPC_TIMEOUT = 5.0
# The child's whole run, start-up included: a bound on a hang, never a timing check.
CHILD_TIMEOUT = 90.0

WIRE = LinkRow(
    namespace="lab",
    uid=3,
    kind=LinkKind.GRPC,
    local=End(pod="r2", netns="/var/run/netns/unused-by-the-manager", intf="eth1"),
    peer=End(pod="r1", netns="", intf="eth1"),
    mtu=1500,
    peer_node_ip=PEER_NODE,
    wire_id=wire_id(slot("lab"), 3, "r2", "r1"),
)

Request = meshwire_pb2.CreateWiresRequest | meshwire_pb2.DeleteWiresRequest


@dataclass(frozen=True)
class Call:
    """One RPC the child makes, to the Peer service or to `host` and `port`."""

    request: Request
    port: int = PEER_PORT
    host: str = "127.0.0.1"


@dataclass(frozen=True)
class WireState:
    ready: bool
    # The AddWire the owning worker must hold (a ready wire's), as a dict; None if none.
    worker: dict[str, Any] | None


@dataclass(frozen=True)
class Outcome:
    # The reply as `MessageToDict` (proto field names, defaults left out), or None.
    reply: dict[str, Any] | None
    # `<exception type>: <message>` of a call that raised, or None.
    error: str | None
    after: WireState


@dataclass(frozen=True)
class Run:
    before: WireState
    calls: list[Outcome]


def run_node(netns: str, workdir: Path, *calls: Call) -> Run:
    """Make `calls` in order against this node, served in netns `netns` (a name)."""
    source, sink = workdir / "calls.json", workdir / "outcomes.json"
    source.write_text(json.dumps([_encode(call) for call in calls]))
    done = subprocess.run(
        ["ip", "netns", "exec", netns, sys.executable, __file__, str(source), str(sink)],
        capture_output=True,
        text=True,
        check=False,
        timeout=CHILD_TIMEOUT,
    )
    if done.returncode != 0:
        raise AssertionError(f"the node in netns {netns} failed:\n{done.stderr}")
    seen = json.loads(sink.read_text())
    return Run(
        WireState(**seen["before"]),
        [Outcome(o["reply"], o["error"], WireState(**o["after"])) for o in seen["calls"]],
    )


def _encode(call: Call) -> dict[str, Any]:
    return {
        "method": type(call.request).__name__,
        "request": base64.b64encode(call.request.SerializeToString()).decode(),
        "port": call.port,
        "host": call.host,
    }


# -- the child ------------------------------------------------------------------


class FakeSlots:
    """Every wire is owned by the worker on DATA_PORT; nothing else happens."""

    def port_of(self, wire_id: int) -> int:
        return DATA_PORT

    def changed(self, wire_id: int) -> None:
        pass


def _state(manager: WireManager) -> dict[str, Any]:
    desired = manager.desired(WIRE.wire_id)
    worker = None if desired is None else dataclasses.asdict(desired.command)
    return {"ready": manager.ready(WIRE.key), "worker": worker}


async def _call(client: GrpcPeerClient, host: str, method: str, request: Any) -> Any:
    if method == "CreateWiresRequest":
        return await client.create_wires(host, request)
    return await client.delete_wires(host, request)


async def _slowly_pass_on(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One connection to SLOW_PORT: after SLOW_DELAY, joined to the Peer service."""
    await asyncio.sleep(SLOW_DELAY)
    up_reader, up_writer = await asyncio.open_connection("127.0.0.1", PEER_PORT)

    async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except OSError:
            pass
        finally:
            dst.close()

    await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))


async def _serve_and_call(calls: list[dict[str, Any]]) -> dict[str, Any]:
    manager = WireManager(THIS_NODE, True, FakeSlots(), WorkQueue(), new_links_table())
    keep, given = os.pipe()
    clients: dict[int, GrpcPeerClient] = {}
    servers = []
    slow = await asyncio.start_server(_slowly_pass_on, "127.0.0.1", SLOW_PORT)
    try:
        manager.attach(WIRE, TapRef((1, 2), 7), given)
        for listen in (f"127.0.0.1:{PEER_PORT}", f"[::1]:{PEER6_PORT}", f":{ANY_PORT}"):
            servers.append(await start_peer_server(listen, manager))
        out: dict[str, Any] = {"before": _state(manager), "calls": []}
        for call in calls:
            kind = getattr(meshwire_pb2, call["method"])
            request = kind.FromString(base64.b64decode(call["request"]))
            if call["port"] not in clients:
                clients[call["port"]] = GrpcPeerClient(call["port"], RPC_TIMEOUT)
            client = clients[call["port"]]
            reply, error = None, None
            try:
                answer = await asyncio.wait_for(
                    _call(client, call["host"], call["method"], request), RPC_TIMEOUT + 10
                )
                reply = MessageToDict(answer, preserving_proto_field_name=True)
            except (PeerError, TimeoutError) as exc:
                error = f"{type(exc).__name__}: {exc}"
            out["calls"].append({"reply": reply, "error": error, "after": _state(manager)})
        return out
    finally:
        for client in clients.values():
            await client.close()
        for server in servers:
            await server.stop(None)
        slow.close()
        manager.close()
        os.close(keep)


if __name__ == "__main__":
    calls_path, out_path = sys.argv[1:3]
    result = asyncio.run(_serve_and_call(json.loads(Path(calls_path).read_text())))
    Path(out_path).write_text(json.dumps(result))
