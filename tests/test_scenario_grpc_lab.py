"""The gRPC wire in whole labs: real daemons, workers, TAPs and Peer RPCs on simulated nodes.

Every lab runs with `inter_node_link_type: grpc`, so each cross-node link is a
TAP in each pod, joined by the two nodes' handshake and carried by their
workers. Outcomes are what a user sees: `lab check` (ARP both ways through
every link), iperf3 and ping through a wire, and each daemon's /metrics
(wires by state, stream refcounts checked against the ready wires, worker
PIDs and restarts).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from lab_helpers import Lab, in_ns, unique_lab

from meshwire.base.netns_thread import call_in_netns
from meshwire.control.auth import certs
from meshwire.control.common.ids import preferred_slot, wire_id
from meshwire.tools.lab.lab_names import node_ip
from meshwire.tools.lab.probe import http_get
from tests.paths import MESHNET

pytestmark = pytest.mark.root

FIXTURES = MESHNET
METRICS_PORT = 51100
SAMPLE = re.compile(r"^([a-z_]+)(\{[^}]*\})? (\S+)$")


@pytest.fixture
def grpc_lab(tmp_path: Path) -> Iterator[Callable[..., Lab]]:
    """Brings up a meshnet fixture with the gRPC wire on N nodes (more config lines in
    `extra`); `lab down` at the end."""
    with ExitStack() as labs:

        def up(fixture: str, nodes: int, extra: str = "") -> Lab:
            config = tmp_path / "grpc.yaml"
            config.write_text(f"inter_node_link_type: grpc\nlog: {{format: text}}\n{extra}")
            lab = labs.enter_context(unique_lab(tmp_path))
            argv = ("up", str(FIXTURES / fixture), "--nodes", str(nodes), "--config", str(config))
            assert lab.run(*argv) == 0
            return lab

        yield up


def metrics(lab: Lab, node: int) -> dict[str, float]:
    """Node `node`'s daemon's /metrics: `name{labels}` -> value."""
    answer = http_get(node_ip(node), METRICS_PORT, "/metrics", netns=f"{lab.prefix}node{node}")
    assert answer is not None and answer[0] == 200
    out = {}
    for line in answer[1].splitlines():
        match = SAMPLE.match(line)
        if match:
            out[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return out


def settled(lab: Lab, node: int) -> dict[str, float]:
    """Metrics once the workers' refcounts have been reported since the last change."""
    deadline = time.monotonic() + 30
    while True:
        sample = metrics(lab, node)
        if sample.get("meshwire_wire_stream_ref_mismatches") == 0:
            return sample
        assert time.monotonic() < deadline, f"node{node}: refcounts never matched: {sample}"
        time.sleep(0.2)


def stream_refs(sample: dict[str, float]) -> dict[str, float]:
    """peer (ip:port) -> wires using the stream to it."""
    out = {}
    for key, value in sample.items():
        if key.startswith("meshwire_wire_stream_refs{"):
            peer = re.search(r'peer="([^"]+)"', key)
            assert peer is not None
            out[peer.group(1)] = value
    return out


def check(lab: Lab, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """`lab check`'s lines; asserts it passed."""
    capsys.readouterr()
    rc = lab.run("check")
    lines = capsys.readouterr().out.splitlines()
    failed = [line for line in lines if line.startswith("FAIL")]
    assert (rc, failed) == (0, []), "\n".join(failed)
    return lines


def in_pod(lab: Lab, pod: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", f"{lab.prefix}default.{pod}", *argv]


def ifindex(lab: Lab, pod: str, intf: str) -> int:
    out = subprocess.run(
        ["ip", "-n", f"{lab.prefix}default.{pod}", "-j", "link", "show", intf],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    index: int = json.loads(out)[0]["ifindex"]
    return index


@pytest.mark.parametrize(("fixture", "nodes"), [("3node.yml", 2), ("3node.yml", 3),
                                                ("5node.yml", 2), ("5node.yml", 3)])  # fmt: skip
def test_cross_node_links_over_the_grpc_wire_pass_check(
    fixture: str,
    nodes: int,
    grpc_lab: Callable[..., Lab],
    capsys: pytest.CaptureFixture[str],
) -> None:
    lab = grpc_lab(fixture, nodes)

    lines = check(lab, capsys)

    kinds = [line.split()[2] for line in lines[:-1]]
    assert "grpc" in kinds and set(kinds) <= {"grpc", "veth"}
    for node in range(1, nodes + 1):
        sample = settled(lab, node)
        assert sample['meshwire_wires{state="waiting"}'] == 0
        assert sample["meshwire_wires_in_workers"] == sample['meshwire_wires{state="ready"}']
        # Its daemon took its ports (metrics, peer, its one worker's) out of the
        # node's ephemeral range.
        done = in_ns(f"{lab.prefix}node{node}", "sysctl", "-n", "net.ipv4.ip_local_reserved_ports")
        assert done.stdout.strip() == "51100,51111-51112", f"node{node}: {done.stderr}"


def test_a_worker_killed_during_iperf3_is_replaced_and_traffic_resumes(
    grpc_lab: Callable[..., Lab], capsys: pytest.CaptureFixture[str]
) -> None:
    lab = grpc_lab("3node.yml", 2)  # r1, r3 on node1, r2 on node2: r1-r2 is a wire
    check(lab, capsys)
    before = settled(lab, 1)
    (pid,) = (int(v) for k, v in before.items() if k.startswith("meshwire_worker_pid"))
    server = subprocess.Popen(
        in_pod(lab, "r2", "iperf3", "-s", "-1", "-B", "12.12.12.2"), stdout=subprocess.DEVNULL
    )
    try:
        time.sleep(0.5)
        client = subprocess.Popen(
            in_pod(lab, "r1", "iperf3", "-c", "12.12.12.2", "-t", "6", "-i", "0.1", "-J"),
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(2)
        os.kill(pid, signal.SIGKILL)
        out, _ = client.communicate(timeout=60)
    finally:
        server.kill()
        server.wait()

    result = json.loads(out)
    assert client.returncode == 0, result.get("error")
    rates = [i["sum"]["bits_per_second"] for i in result["intervals"]]
    stalled = [i for i, rate in enumerate(rates) if rate < 1e6]
    assert stalled, "the kill did not show in the transfer (it ran before or after iperf3?)"
    assert rates[-1] > 1e8, "traffic did not resume after the worker was killed"
    with capsys.disabled():
        print(f"\n[measured] worker SIGKILL: {len(stalled)} intervals of 0.1 s below 1 Mbit/s")
    after = settled(lab, 1)
    assert after["meshwire_worker_restarts_total"] == 1
    assert after['meshwire_wires{state="ready"}'] == before['meshwire_wires{state="ready"}']
    assert stream_refs(after) == stream_refs(before)
    check(lab, capsys)


def test_a_peer_pod_moved_to_another_node_takes_its_wires_along(
    grpc_lab: Callable[..., Lab], capsys: pytest.CaptureFixture[str]
) -> None:
    lab = grpc_lab("3node.yml", 3)  # r1 on node1, r2 on node2, r3 on node3: three wires
    assert stream_refs(settled(lab, 1)) == {f"{node_ip(2)}:51112": 1, f"{node_ip(3)}:51112": 1}

    capsys.readouterr()
    assert lab.run("move-pod", "r2", "node3") == 0

    deadline = time.monotonic() + 30
    while stream_refs(settled(lab, 1)) != {f"{node_ip(3)}:51112": 2}:
        assert time.monotonic() < deadline, stream_refs(metrics(lab, 1))
        time.sleep(0.2)
    lines = check(lab, capsys)
    kinds = {line.split()[1]: line.split()[2] for line in lines[:-1]}
    assert kinds == {"default/1": "grpc", "default/2": "grpc", "default/3": "veth"}
    node2 = settled(lab, 2)
    assert node2['meshwire_wires{state="ready"}'] == 0
    assert stream_refs(node2) == {}


def test_a_pod_restarted_with_a_new_netns_gets_a_fresh_tap_and_nothing_stale(
    grpc_lab: Callable[..., Lab], capsys: pytest.CaptureFixture[str]
) -> None:
    lab = grpc_lab("3node.yml", 2)
    check(lab, capsys)

    for _ in range(3):
        assert lab.run("restart-pod", "r2") == 0
    lines = check(lab, capsys)

    assert len(lines) == 4
    for node in (1, 2):
        sample = settled(lab, node)
        (pid,) = (int(v) for k, v in sample.items() if k.startswith("meshwire_worker_pid"))
        taps = [
            fd
            for fd in os.listdir(f"/proc/{pid}/fd")
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "/dev/net/tun"
        ]
        # One TAP fd per wire of the node: none of the restarted pod's old TAPs stayed open.
        assert len(taps) == sample["meshwire_wires_in_workers"] == 2


def test_a_daemon_killed_and_restarted_reattaches_its_taps_without_recreating_them(
    grpc_lab: Callable[..., Lab], capsys: pytest.CaptureFixture[str]
) -> None:
    lab = grpc_lab("3node.yml", 2)
    check(lab, capsys)
    before = {pod: ifindex(lab, pod, "eth1") for pod in ("r1", "r2")}

    assert lab.run("kill-daemon", "node1") == 0

    deadline = time.monotonic() + 30
    while settled(lab, 1)['meshwire_wires{state="ready"}'] != 2:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    check(lab, capsys)
    assert {pod: ifindex(lab, pod, "eth1") for pod in ("r1", "r2")} == before


def plumbing_error(lab: Lab, capsys: pytest.CaptureFixture[str], pod: str) -> str:
    """`pod`'s plumbing_error, as `lab status` reads it from the API."""
    capsys.readouterr()
    assert lab.run("status", "--json") == 0
    pods = json.loads(capsys.readouterr().out)["pods"]
    (error,) = (p["plumbing_error"] for p in pods if p["pod"] == f"default/{pod}")
    return str(error)


def test_a_wire_whose_peer_node_does_not_answer_is_named_in_plumbing_error_until_it_does(
    grpc_lab: Callable[..., Lab], capsys: pytest.CaptureFixture[str]
) -> None:
    lab = grpc_lab("3node.yml", 2)
    check(lab, capsys)
    processes = json.loads((lab.directory / "state.json").read_text())["processes"]
    (daemon,) = (p["pid"] for p in processes if p["role"] == "daemon/node2")

    # node2's daemon frozen, node1's restarted: it attaches r1's TAP again (the row is
    # done), and its handshake with node2 for r1's link to r2 fails.
    os.killpg(daemon, signal.SIGSTOP)
    try:
        assert lab.run("kill-daemon", "node1") == 0
        deadline = time.monotonic() + 60
        while "link default/1: peer node" not in (error := plumbing_error(lab, capsys, "r1")):
            assert time.monotonic() < deadline, f"r1's plumbing_error: {error!r}"
            time.sleep(0.5)
    finally:
        os.killpg(daemon, signal.SIGCONT)

    deadline = time.monotonic() + 60
    while error := plumbing_error(lab, capsys, "r1"):
        assert time.monotonic() < deadline, f"r1's plumbing_error stayed: {error!r}"
        time.sleep(0.5)
    check(lab, capsys)


@pytest.mark.parametrize("seconds", [3, 25])
def test_a_node_cut_off_the_network_and_plugged_back_gets_its_wires_back_as_they_were(
    grpc_lab: Callable[..., Lab], capsys: pytest.CaptureFixture[str], seconds: int
) -> None:
    # 25 s outlasts the streams' TCP user timeout (20 s): the connections fail and
    # are opened again; 3 s is waited out by TCP's retransmissions.
    lab = grpc_lab("3node.yml", 2)
    check(lab, capsys)
    taps = {pod: ifindex(lab, pod, "eth1") for pod in ("r1", "r2")}
    before = [stream_refs(settled(lab, node)) for node in (1, 2)]

    capsys.readouterr()
    assert lab.run("partition", "node2", "--seconds", str(seconds)) == 0
    healed = time.monotonic()

    ping = in_pod(lab, "r1", "ping", "-c", "1", "-W", "1", "12.12.12.2")
    while subprocess.run(ping, capture_output=True, check=False).returncode != 0:
        assert time.monotonic() < healed + 60, "no ping across the wire after the partition"
    with capsys.disabled():
        print(f"\n[measured] {seconds} s partition: a ping crossed the wire "
              f"{time.monotonic() - healed:.1f} s after it ended")  # fmt: skip
    check(lab, capsys)
    assert {pod: ifindex(lab, pod, "eth1") for pod in ("r1", "r2")} == taps
    assert [stream_refs(settled(lab, node)) for node in (1, 2)] == before


def test_with_offloads_off_the_wire_carries_full_size_frames_unchanged(
    grpc_lab: Callable[..., Lab], capsys: pytest.CaptureFixture[str]
) -> None:
    lab = grpc_lab("3node.yml", 2, "dataplane: {offloads: false}\n")
    check(lab, capsys)

    ping = subprocess.run(
        in_pod(lab, "r1", "ping", "-c", "3", "-i", "0.2", "-s", "1472", "-M", "do", "12.12.12.2"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert ping.returncode == 0, ping.stdout
    # The TAPs are in the nodes' netns, behind the pods' ends.
    shown = "".join(
        subprocess.run(
            ["ip", "-n", f"{lab.prefix}node{node}", "-d", "link", "show", "type", "tun"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for node in (1, 2)
    )
    assert "vnet_hdr" in shown and "vnet_hdr on" not in shown


# A stock grpcio client without credentials, as issue 22 tried: Peer.CreateWires and
# Peer.DeleteWires claiming node2, then Wire/Frames carrying an LLDP frame (behind the
# TAPs' virtio-net header) for every wire id the public names derive. Prints each
# call's status code.
INTRUDER = """
import sys, grpc
from meshwire.proto import meshwire_pb2 as pb, meshwire_pb2_grpc as pbg
node_ip, claimed_ip, frame = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3])
ids = [int(i) for i in sys.argv[4:]]
def code(call):
    try:
        call()
        return "OK"
    except grpc.RpcError as exc:
        return exc.code().name
peer = pbg.PeerStub(grpc.insecure_channel(f"{node_ip}:51111"))
end = pb.WireEnd(namespace="default", uid=1, pod="r1")
offer = pb.WireOffer(local=pb.WireEnd(namespace="default", uid=1, pod="r2"), peer_pod="r1",
                     wire_id=ids[0], data_port=51112)
print(code(lambda: peer.CreateWires(pb.CreateWiresRequest(node="node2", node_ip=claimed_ip,
                                                          wires=[offer]), timeout=10)))
print(code(lambda: peer.DeleteWires(pb.DeleteWiresRequest(node="node2", node_ip=claimed_ip,
                                                          wires=[end]), timeout=10)))
batch = b"".join(i.to_bytes(4, "big") + len(frame).to_bytes(2, "big") + frame for i in ids)
frames = grpc.insecure_channel(f"{node_ip}:51112").stream_unary(
    "/meshwire.v1.Wire/Frames", request_serializer=pb.Batch.SerializeToString,
    response_deserializer=pb.FramesSummary.FromString)
print(code(lambda: frames(iter([pb.Batch(frames=batch)] * 5), timeout=10,
                          metadata=[("meshwire-namespace", "default")])))
"""


def sniffer(lab: Lab, pod: str) -> socket.socket:
    """A packet socket on every interface of the pod's netns."""

    def bind() -> socket.socket:
        return socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))

    return call_in_netns(f"/var/run/netns/{lab.prefix}default.{pod}", bind)


def heard(sock: socket.socket, marker: bytes, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            if marker in sock.recv(65536):
                return True
        except TimeoutError:
            return False
    return False


def test_a_client_without_credentials_is_refused_and_none_of_its_frames_reaches_a_pod(
    grpc_lab: Callable[..., Lab], capsys: pytest.CaptureFixture[str]
) -> None:
    lab = grpc_lab("3node.yml", 2)  # r1, r3 on node1; r2 on node2
    check(lab, capsys)
    slot = preferred_slot("default", 5000)
    pods = ("r1", "r2", "r3")
    ids = sorted(
        {wire_id(slot, uid, p, q) for uid in (1, 2, 3) for p in pods for q in pods if p != q}
    )
    marker = secrets.token_bytes(16)
    frame = bytes(10) + bytes.fromhex("0180c200000e02aa0000000188cc") + marker + bytes(46)
    listeners = [sniffer(lab, "r1"), sniffer(lab, "r3")]
    try:
        done = in_ns(
            f"{lab.prefix}node2",
            sys.executable, "-c", INTRUDER, node_ip(1), node_ip(2), frame.hex(), *map(str, ids),
        )  # fmt: skip
        # Peer: no client certificate fails the TLS handshake; Wire: the worker closes a
        # connection without preface before any HTTP/2 answer.
        assert done.stdout.split() == ["UNAVAILABLE"] * 3, done.stderr
        assert not any(heard(sock, marker, 2.0) for sock in listeners)
    finally:
        for sock in listeners:
            sock.close()
    deadline = time.monotonic() + 30
    while metrics(lab, 1).get('meshwire_auth_refused_total{service="wire"}', 0) < 1:
        assert time.monotonic() < deadline, "the refused stream was not counted"
        time.sleep(0.2)
    # The lab's own links, authenticated, all still pass.
    check(lab, capsys)
    assert settled(lab, 1)['meshwire_wires{state="waiting"}'] == 0


def test_new_credentials_keep_running_wires_and_serve_every_new_connection(
    grpc_lab: Callable[..., Lab], capsys: pytest.CaptureFixture[str]
) -> None:
    """The lab's credential files replaced at once by new ones (the worst case: no
    overlap): the wires that run keep running; a worker and a daemon started afterwards
    connect with the new ones, and every link passes `lab check` again."""
    lab = grpc_lab("3node.yml", 2)  # r1-r2 and r2-r3 are wires, node1 to node2
    check(lab, capsys)
    taps = {pod: ifindex(lab, pod, "eth1") for pod in ("r1", "r2")}
    auth = lab.directory / "auth"
    fresh = lab.directory / "auth-new"
    certs.init_dir(fresh)
    for name in (certs.CA_CERT, certs.CA_KEY, certs.WIRE_KEY):
        os.replace(fresh / name, auth / name)

    check(lab, capsys)  # the streams and channels made before carry on
    (pid,) = (int(v) for k, v in settled(lab, 2).items() if k.startswith("meshwire_worker_pid"))
    os.kill(pid, signal.SIGKILL)  # its new streams, both ways, use the new wire key
    assert lab.run("kill-daemon", "node1") == 0  # a new certificate, new Peer channels
    deadline = time.monotonic() + 60
    while any(settled(lab, node)['meshwire_wires{state="ready"}'] != 2 for node in (1, 2)):
        assert time.monotonic() < deadline, "the wires did not come back with the new credentials"
        time.sleep(0.2)
    check(lab, capsys)
    assert {pod: ifindex(lab, pod, "eth1") for pod in ("r1", "r2")} == taps
    for node in (1, 2):
        assert metrics(lab, node).get('meshwire_auth_refused_total{service="wire"}', 0) == 0
