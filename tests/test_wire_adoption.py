"""Workers with a run directory outlive their pool and are adopted by the next one.

Real workers on the loopback of a test netns, pods as netns with a TAP
(dataplane_helpers); the run directory is deeper than an AF_UNIX path may be.
A pool that closes leaves its workers forwarding; the next pool on the same
run directory takes over the ones of its config with the wires they hold,
removes a socket no worker is behind, and replaces a worker of another config
or an index it no longer has. Teardown stops every worker left in the directory.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from dataplane_helpers import NODE, Pod, close_pods, make_node, make_pod, netns_prefix, ping
from dataplane_helpers import wait_until as wait_for

import meshwire.dataplane
from meshwire.control.wire.manager import Desired
from meshwire.control.wire.supervisor import PoolSettings, WorkerPool
from meshwire.dataplane import rundir
from meshwire.dataplane.messages import AddWire

pytestmark = pytest.mark.root

NS = "lab"


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[str]:
    """A run directory whose path alone is longer than an AF_UNIX path may be."""
    path = tmp_path / ("r" * 60) / ("w" * 60)
    path.mkdir(parents=True)
    assert len(str(path / rundir.socket_name(0))) > 108
    try:
        yield str(path)
    finally:
        rundir.stop_all(str(path))


@pytest.fixture
def pods() -> Iterator[tuple[str, Pod, Pod]]:
    """A node netns, and pods a (10.0.0.1) and b (10.0.0.2) each with a TAP."""
    with netns_prefix() as prefix:
        node = make_node(prefix)
        a = make_pod(prefix, "a", "10.0.0.1/24")
        b = make_pod(prefix, "b", "10.0.0.2/24")
        try:
            yield node, a, b
        finally:
            close_pods(a, b)


class Adopted:
    """Stands in for the wire manager's `adopt`: keeps what it is handed."""

    def __init__(self) -> None:
        self.wires: dict[int, tuple[AddWire, int]] = {}

    def __call__(self, command: AddWire, fd: int) -> int | None:
        self.wires[command.wire_id] = (command, fd)
        return 1

    def close(self) -> None:
        for _, fd in self.wires.values():
            os.close(fd)


def pool_settings(
    node: str, port_base: int, run_dir: str = "", count: int = 1, batch_frames: int = 256,
    orphan_grace: float = 60.0, wire_key: str = "",
) -> PoolSettings:  # fmt: skip
    return PoolSettings(
        count, NODE, port_base, batch_frames, 0.1, netns=node, run_dir=run_dir,
        orphan_grace=orphan_grace, wire_key=wire_key,
    )  # fmt: skip


@asynccontextmanager
async def pool(
    node: str,
    port_base: int,
    desired: dict[int, Desired],
    run_dir: str = "",
    count: int = 1,
    batch_frames: int = 256,
    adopted: Adopted | None = None,
    orphan_grace: float = 60.0,
    wire_key: str = "",
) -> AsyncIterator[WorkerPool]:
    """A pool, adopting what it finds in `run_dir` (if any) before it starts."""
    settings = pool_settings(node, port_base, run_dir, count, batch_frames, orphan_grace, wire_key)
    started = WorkerPool(settings, desired.get, adopted or Adopted())
    await started.adopt()
    await started.start()
    try:
        yield started
    finally:
        await started.close()


def wire(
    pool_: WorkerPool, want: dict[int, Desired], wire_id: int, fd: int, peer: int, port: int,
    impairments: tuple[float, ...] = (), generation: int = 1,
) -> None:  # fmt: skip
    command = AddWire(wire_id, NS, NODE, port, peer, impairments, note="n")
    want[wire_id] = Desired(command, fd, generation)
    pool_.changed(wire_id)


def alive(pid: int) -> bool:
    return rundir.start_time(pid) is not None


async def test_a_worker_left_running_keeps_forwarding_and_is_adopted_with_its_wires(
    pods: tuple[str, Pod, Pod], run_dir: str
) -> None:
    node, a, b = pods
    want_a: dict[int, Desired] = {}
    want_b: dict[int, Desired] = {}
    async with pool(node, 53000, want_a, run_dir) as pa, pool(node, 53100, want_b) as pb:
        wire(pa, want_a, 2, a.fd, 3, 53100)
        wire(pb, want_b, 3, b.fd, 2, 53000)
        await wait_for(lambda: 2 in pa.counters() and 3 in pb.counters())
        assert ping(a, b.address)
        (old_pid,) = pa.pids().values()

        await pa.close()  # the daemon goes: its worker stays, forwarding
        assert alive(old_pid)
        assert ping(a, b.address)

        adopted = Adopted()
        try:
            async with pool(node, 53000, {}, run_dir, adopted=adopted) as again:
                assert again.pids() == {0: old_pid}
                (command, fd) = adopted.wires[2]
                assert command == want_a[2].command
                assert os.path.samestat(os.fstat(fd), os.fstat(a.fd))
                assert ping(a, b.address)
        finally:
            adopted.close()
        assert alive(old_pid)  # closed again: still left running


async def test_a_stale_socket_and_a_dead_worker_are_cleaned_and_a_new_worker_started(
    pods: tuple[str, Pod, Pod], run_dir: str
) -> None:
    node, _, _ = pods
    with rundir.short_path(run_dir, rundir.socket_name(1)) as path:
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        stale.bind(path)  # a socket file nobody listens on
        stale.close()
    async with pool(node, 53200, {}, run_dir) as first:
        (killed,) = first.pids().values()
    os.kill(killed, signal.SIGKILL)  # its socket file stays behind
    await wait_for(lambda: not alive(killed), within=30)

    async with pool(node, 53200, {}, run_dir, count=2) as second:
        assert killed not in second.pids().values()
        assert len(second.pids()) == 2
        assert rundir.indexes(run_dir) == [0, 1]


async def test_a_worker_of_another_config_is_stopped_and_replaced(
    pods: tuple[str, Pod, Pod], run_dir: str
) -> None:
    node, _, _ = pods
    async with pool(node, 53300, {}, run_dir, batch_frames=256) as first:
        (old_pid,) = first.pids().values()

    async with pool(node, 53300, {}, run_dir, batch_frames=64) as second:
        assert not alive(old_pid)
        assert second.pids()[0] != old_pid


async def test_workers_of_an_index_no_longer_used_are_stopped(
    pods: tuple[str, Pod, Pod], run_dir: str
) -> None:
    node, _, _ = pods
    async with pool(node, 53400, {}, run_dir, count=2) as first:
        pids = first.pids()

    async with pool(node, 53400, {}, run_dir, count=1) as second:
        assert second.pids() == {0: pids[0]}
        assert not alive(pids[1])
        assert rundir.indexes(run_dir) == [0]


async def test_without_a_run_directory_the_workers_stop_with_the_pool(
    pods: tuple[str, Pod, Pod],
) -> None:
    node, _, _ = pods
    async with pool(node, 53500, {}) as only:
        (pid,) = only.pids().values()
    await wait_for(lambda: not alive(pid), within=30)


async def test_a_worker_without_control_and_without_wires_exits_after_the_grace(
    pods: tuple[str, Pod, Pod], run_dir: str
) -> None:
    node, a, _ = pods
    want: dict[int, Desired] = {}
    async with pool(node, 53600, want, run_dir, count=2, orphan_grace=0.5) as first:
        wire(first, want, 2, a.fd, 3, 53999)  # on worker 1; worker 0 holds nothing
        await wait_for(lambda: 2 in first.counters())
        pids = first.pids()

    await wait_for(lambda: not alive(pids[0]), within=30)
    assert rundir.indexes(run_dir) == [1]
    assert alive(pids[1])  # it carries a wire: it waits for the next control


async def test_an_adopted_worker_that_dies_is_restarted_and_handed_its_wires(
    pods: tuple[str, Pod, Pod], run_dir: str
) -> None:
    node, a, b = pods
    want_a: dict[int, Desired] = {}
    want_b: dict[int, Desired] = {}
    async with pool(node, 53700, want_b) as pb:
        wire(pb, want_b, 3, b.fd, 2, 53800)
        async with pool(node, 53800, want_a, run_dir) as first:
            wire(first, want_a, 2, a.fd, 3, 53700)
            await wait_for(lambda: 2 in first.counters())
        adopted = Adopted()
        try:
            async with pool(node, 53800, want_a, run_dir, adopted=adopted) as again:
                (pid,) = again.pids().values()
                command, fd = adopted.wires[2]
                want_a[2] = Desired(command, fd, generation=1)
                again.changed(2)

                os.kill(pid, signal.SIGKILL)

                await wait_for(lambda: again.restarts() == 1 and 2 in again.counters(), 30)
                assert again.pids()[0] != pid
                assert ping(a, b.address)
        finally:
            adopted.close()


async def test_a_process_of_another_user_gets_no_answer_from_a_worker(
    pods: tuple[str, Pod, Pod], run_dir: str
) -> None:
    node, _, _ = pods
    async with pool(node, 53900, {}, run_dir) as only:
        (pid,) = only.pids().values()
        # Opened up as a careless admin might: still no worker answers nobody.
        os.chmod(run_dir, 0o711)
        with rundir.short_path(run_dir, rundir.socket_name(0)) as path:
            os.chmod(path, 0o777)
        directory = os.open(run_dir, os.O_PATH)
        code = (
            "import socket, sys; s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); "
            f"s.connect('/proc/self/fd/{directory}/{rundir.socket_name(0)}'); "
            "s.settimeout(20); print(len(s.recv(65536)))"
        )
        try:
            child = await asyncio.create_subprocess_exec(
                "/usr/bin/python3", "-c", code, user=65534, pass_fds=(directory,),
                stdout=subprocess.PIPE,
            )  # fmt: skip
            heard = (await asyncio.wait_for(child.communicate(), 60))[0].decode()
        finally:
            os.close(directory)
        assert heard.strip() == "0"  # closed at once, not a Hello
        assert only.pids() == {0: pid}


# The control process of a DaemonSet pod that is being replaced: it starts its workers in
# the pod's own mount namespace, then goes, leaving them running.
LEAVING_CONTROL = """
import asyncio, json, sys
from meshwire.control.wire.supervisor import PoolSettings, WorkerPool
async def main():
    pool = WorkerPool(PoolSettings(**json.loads(sys.argv[1])), lambda wire_id: None)
    await pool.start()
    print(json.dumps(list(pool.pids().values())))
    await pool.close()
asyncio.run(main())
"""


def start_in_own_mounts(settings: PoolSettings, folder: Path) -> int:
    """A worker started by a control process in a mount namespace of its own; its pid.
    Their output goes to files in `folder` (a pipe would stay open in the worker)."""
    with (folder / "pids").open("w") as out, (folder / "log").open("w") as log:
        subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "--", sys.executable, "-c",
             LEAVING_CONTROL, json.dumps(dataclasses.asdict(settings))],
            check=True, stdout=out, stderr=log, timeout=60,
        )  # fmt: skip
    (pid,) = json.loads((folder / "pids").read_text())
    return int(pid)


def hide_files_from(pid: int) -> list[str]:
    """Covers the code, the interpreter, the libraries and /etc in the worker's mount
    namespace, as a replaced container's removed snapshot leaves them to its processes;
    returns the folders covered. /usr goes last: `mount` runs from it."""
    code = Path(meshwire.dataplane.__file__).resolve().parents[1]
    folders = {code, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), Path("/etc")}
    covered = [str(f) for f in sorted(folders) if not any(o in f.parents for o in folders)]
    covered = [f for f in covered if f != "/usr"] + ["/usr"]
    for folder in covered:
        subprocess.run(
            ["nsenter", "-t", str(pid), "-m", "--", "mount", "-t", "tmpfs", "-o", "size=64k",
             "mwt-hidden", folder],
            check=True, capture_output=True,
        )  # fmt: skip
    return covered


async def test_an_adopted_worker_forwards_after_every_file_it_started_from_is_gone(
    pods: tuple[str, Pod, Pod], run_dir: str, tmp_path: Path
) -> None:
    """A DaemonSet rollout: the old pod's snapshot is removed under its workers, and the
    new pod's control hands them wires they never held (vxlan until then, grpc now)."""
    node, a, b = pods
    key = tmp_path / "wire.key"
    key.write_text(secrets.token_bytes(32).hex() + "\n")
    settings = pool_settings(node, 54000, run_dir, wire_key=str(key))
    pid = start_in_own_mounts(settings, tmp_path)
    for folder in hide_files_from(pid):
        assert not os.listdir(f"/proc/{pid}/root{folder}"), folder
    want_a: dict[int, Desired] = {}
    want_b: dict[int, Desired] = {}
    adopted = Adopted()
    try:
        async with pool(node, 54100, want_b, wire_key=str(key)) as pb:
            wire(pb, want_b, 3, b.fd, 2, 54000)
            async with pool(node, 54000, want_a, run_dir, adopted=adopted, wire_key=str(key)) as pa:
                assert pa.pids() == {0: pid}
                wire(pa, want_a, 2, a.fd, 3, 54100)
                await wait_for(lambda: 2 in pa.counters() and 3 in pb.counters())
                assert await asyncio.to_thread(ping, a, b.address)
                # Impaired (5 ms delay), then cleared: the emulator's path, then back.
                wire(pa, want_a, 2, a.fd, 3, 54100, (5.0, 0, 0, 0, 0, 0, 0), generation=2)
                await wait_for(lambda: pa.holds(2) == want_a[2].command)
                assert await asyncio.to_thread(ping, a, b.address)
                wire(pa, want_a, 2, a.fd, 3, 54100, generation=3)
                await wait_for(lambda: pa.holds(2) == want_a[2].command)
                assert await asyncio.to_thread(ping, a, b.address)
                assert pa.pids() == {0: pid}, "the adopted worker died"
    finally:
        adopted.close()
