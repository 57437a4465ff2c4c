"""This node's handshakes with two peer nodes, one of which accepts TCP and never answers.

Run for real in a child process that `ip netns exec` starts in the test's own
netns (lo up), so that every socket gRPC opens, from whichever of its threads,
is in that netns (as peer_helpers.py does):

- HUNG_NODE (127.0.0.2) accepts every connection on the peer port and then says
  nothing, ever: a node whose kernel is up and whose daemon is stuck;
- GOOD_NODE (127.0.0.3) runs the real Peer service over a WireManager holding its
  end of link lab/2;
- this node (127.0.0.1) holds one wire towards each (lab/1 to r2 on HUNG_NODE,
  lab/2 to r3 on GOOD_NODE) and runs the real Handshaker and GrpcPeerClient with
  the daemon's default configuration (`peer.rpc_timeout`).

The child watches the two wires until the hung node's wire records a problem
(or OBSERVE_LIMIT passes) and reports what it saw as JSON.

Run as a script, this file is that child: `hang_helpers.py OUT_JSON`.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slot_helpers import slot

from meshwire.control.common.config import load_config
from meshwire.control.common.ids import wire_id
from meshwire.control.common.queue import WorkQueue
from meshwire.control.tables.links import End, LinkKind, LinkRow, new_links_table
from meshwire.control.wire.handshake import Handshaker
from meshwire.control.wire.manager import WireManager
from meshwire.control.wire.peer_client import GrpcPeerClient
from meshwire.control.wire.peer_service import start_peer_server
from meshwire.control.wire.types import TapRef

THIS_NODE = "127.0.0.1"
HUNG_NODE = "127.0.0.2"
GOOD_NODE = "127.0.0.3"
PEER_PORT = 50061
DATA_PORT = 7200
# How long the child watches for the hung node's wire to record its problem: a bound
# on a hang (several times the default per-RPC timeout), never a timing check.
OBSERVE_LIMIT = 60.0
CHILD_TIMEOUT = OBSERVE_LIMIT + 60.0
POLL = 0.01


def row(uid: int, pod: str, peer: str, peer_node_ip: str) -> LinkRow:
    return LinkRow(
        namespace="lab",
        uid=uid,
        kind=LinkKind.GRPC,
        local=End(pod=pod, netns="/var/run/netns/unused-by-the-manager", intf=f"eth{uid}"),
        peer=End(pod=peer, netns="", intf=f"eth{uid}"),
        mtu=1500,
        peer_node_ip=peer_node_ip,
        wire_id=wire_id(slot("lab"), uid, pod, peer),
    )


TO_HUNG = row(1, "r1", "r2", HUNG_NODE)
TO_GOOD = row(2, "r1", "r3", GOOD_NODE)
GOOD_END = row(2, "r3", "r1", THIS_NODE)


@dataclass(frozen=True)
class Seen:
    # The per-RPC timeout the daemon's configuration gives the client.
    rpc_timeout: float
    # The good node's wire was ready while the call to the hung node was still out
    # (the hung node had accepted it and the wire had no problem yet).
    good_ready_while_hung_call_out: bool
    # The hung node's wire's problem, as the pod's plumbing_error shows it ("" if none).
    hung_problem: str
    # The good node's wire is still ready once the hung one has failed.
    good_ready_at_end: bool
    # Connections the hung node accepted.
    accepted: int


def run_child(netns: str, out: Path) -> Seen:
    """Run the child in netns `netns` (a name); what it saw, written to `out`."""
    done = subprocess.run(
        ["ip", "netns", "exec", netns, sys.executable, __file__, str(out)],
        capture_output=True,
        text=True,
        check=False,
        timeout=CHILD_TIMEOUT,
    )
    if done.returncode != 0:
        raise AssertionError(f"the node in netns {netns} failed:\n{done.stderr}")
    return Seen(**json.loads(out.read_text()))


# -- the child ------------------------------------------------------------------


class FakeSlots:
    def port_of(self, wire_id: int) -> int:
        return DATA_PORT

    def changed(self, wire_id: int) -> None:
        pass


async def _watch() -> dict[str, Any]:
    held: list[asyncio.StreamWriter] = []

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    config = load_config(None, env={}, overrides={"node_ip": THIS_NODE})
    hung = await asyncio.start_server(never_answer, HUNG_NODE, PEER_PORT)
    good = WireManager(GOOD_NODE, True, FakeSlots(), WorkQueue(), new_links_table())
    links = new_links_table()
    here = WireManager(THIS_NODE, True, FakeSlots(), WorkQueue(), links)
    client = GrpcPeerClient(PEER_PORT, config.peer.rpc_timeout)
    pipes = [os.pipe() for _ in range(3)]
    server = None
    handshakes = None
    try:
        good.attach(GOOD_END, TapRef((1, 3), 7), pipes[0][1])
        server = await start_peer_server(f"{GOOD_NODE}:{PEER_PORT}", good)
        links.upsert(TO_HUNG.key, TO_HUNG)
        here.attach(TO_HUNG, TapRef((1, 1), 8), pipes[1][1])
        here.attach(TO_GOOD, TapRef((1, 1), 9), pipes[2][1])
        handshakes = asyncio.create_task(Handshaker(here, client, "node1").run())
        while_out = False
        problem = ""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + OBSERVE_LIMIT
        while loop.time() < deadline:
            problem = links.health(TO_HUNG.key).handshake
            if problem:
                break
            if here.ready(TO_GOOD.key) and held:
                while_out = True
            await asyncio.sleep(POLL)
        return {
            "rpc_timeout": config.peer.rpc_timeout,
            "good_ready_while_hung_call_out": while_out,
            "hung_problem": problem,
            "good_ready_at_end": here.ready(TO_GOOD.key),
            "accepted": len(held),
        }
    finally:
        if handshakes is not None:
            here.nodes.shutdown()
            handshakes.cancel()
            await asyncio.gather(handshakes, return_exceptions=True)
        await client.close()
        if server is not None:
            await server.stop(None)
        for writer in held:
            writer.close()
        hung.close()
        here.close()
        good.close()
        for keep, _ in pipes:
            os.close(keep)


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps(asyncio.run(_watch())))
