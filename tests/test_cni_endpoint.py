"""The runtime's view: a shim (the C binary or its Python twin) exec'd against a
running daemon endpoint, with an in-memory handler standing in for the daemon."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cni_helpers import (
    PREV_RESULT,
    InMemoryHandler,
    Recorded,
    cni_env,
    network_config,
    run_shim,
    temp_dir,
)

from meshwire.control.cni.endpoint import CniEndpoint, EndpointError
from meshwire.control.cni.protocol import CniError, ErrorCode


@dataclass
class Daemon:
    socket: str
    handler: InMemoryHandler
    endpoint: CniEndpoint
    directory: Path


@pytest.fixture
async def daemon() -> AsyncIterator[Daemon]:
    directory = temp_dir()
    path = str(directory / "run" / "cni.sock")
    handler = InMemoryHandler(in_topology={"default/r1", "default/r2"})
    endpoint = CniEndpoint(path, handler)
    await endpoint.start()
    try:
        yield Daemon(path, handler, endpoint, directory)
    finally:
        await endpoint.close(grace=0)
        shutil.rmtree(directory, ignore_errors=True)


def exists(path: str) -> bool:
    return os.path.exists(path)


SHIMS = pytest.mark.parametrize("kind", ["c", "python"])


def config(d: Daemon, version: str = "1.0.0", **extra: object) -> dict[str, object]:
    """The config a runtime passes: the socket comes from the conflist, as installed."""
    return network_config(version, meshwire_socket=d.socket, **extra)


@SHIMS
async def test_add_of_a_topology_pod_records_it_and_passes_prev_result_through(
    daemon: Daemon, kind: str
) -> None:
    run = await run_shim(kind, cni_env("ADD"), config(daemon, prevResult=PREV_RESULT))
    assert run.exit == 0
    assert run.result == PREV_RESULT
    assert daemon.handler.pods == {
        "default/r1": Recorded("c0ffee01", "/var/run/netns/cni-1234", "eth0")
    }


@SHIMS
async def test_a_pod_in_no_topology_passes_through_untouched(daemon: Daemon, kind: str) -> None:
    env = cni_env("ADD", pod="kube-system/coredns-1")
    run = await run_shim(kind, env, config(daemon, prevResult=PREV_RESULT))
    assert (run.exit, run.result) == (0, PREV_RESULT)
    assert daemon.handler.pods == {}
    assert daemon.handler.calls == ["ADD(kube-system/coredns-1)"]


@SHIMS
async def test_add_without_prev_result_prints_an_empty_result(daemon: Daemon, kind: str) -> None:
    run = await run_shim(kind, cni_env("ADD"), config(daemon, "0.3.1"))
    assert run.exit == 0
    assert run.result == {"cniVersion": "0.3.1", "interfaces": [], "ips": [], "dns": {}}


@SHIMS
async def test_del_forgets_the_pod_and_a_repeated_del_still_succeeds(
    daemon: Daemon, kind: str
) -> None:
    await run_shim(kind, cni_env("ADD"), config(daemon))
    for _ in range(2):
        run = await run_shim(kind, cni_env("DEL"), config(daemon, prevResult=PREV_RESULT))
        assert (run.exit, run.stdout) == (0, b"")
    assert daemon.handler.pods == {}


@SHIMS
async def test_del_for_a_stale_container_id_leaves_the_new_sandbox_alone(
    daemon: Daemon, kind: str
) -> None:
    await run_shim(kind, cni_env("ADD", container="new0001"), config(daemon))
    run = await run_shim(kind, cni_env("DEL", container="old0001"), config(daemon))
    assert run.exit == 0
    assert daemon.handler.pods["default/r1"].container_id == "new0001"


@SHIMS
async def test_check_passes_for_an_added_pod_and_fails_with_the_handlers_code(
    daemon: Daemon, kind: str
) -> None:
    await run_shim(kind, cni_env("ADD"), config(daemon))
    ok = await run_shim(kind, cni_env("CHECK"), config(daemon, prevResult=PREV_RESULT))
    assert (ok.exit, ok.stdout) == (0, b"")
    missing = await run_shim(
        kind, cni_env("CHECK", pod="default/r2"), config(daemon, prevResult=PREV_RESULT)
    )
    assert missing.exit == 1
    assert missing.result == {
        "cniVersion": "1.0.0",
        "code": 3,
        "msg": "pod default/r2 was never added",
    }


@SHIMS
async def test_status_succeeds_and_reports_the_handlers_unavailability(
    daemon: Daemon, kind: str
) -> None:
    env = {"CNI_COMMAND": "STATUS", "CNI_PATH": "/opt/cni/bin"}
    ok = await run_shim(kind, env, config(daemon, "1.1.0"))
    assert (ok.exit, ok.stdout) == (0, b"")
    daemon.handler.failures["STATUS"] = CniError(
        ErrorCode.PLUGIN_NOT_AVAILABLE, "meshwire daemon not synced yet"
    )
    down = await run_shim(kind, env, config(daemon, "1.1.0"))
    assert down.exit == 1
    assert down.result["code"] == 50


@SHIMS
async def test_gc_drops_what_is_not_a_valid_attachment(daemon: Daemon, kind: str) -> None:
    await run_shim(kind, cni_env("ADD", container="keep0001"), config(daemon))
    await run_shim(kind, cni_env("ADD", pod="default/r2", container="gone0001"), config(daemon))
    valid = {"cni.dev/valid-attachments": [{"containerID": "keep0001", "ifname": "eth0"}]}
    run = await run_shim(kind, {"CNI_COMMAND": "GC"}, config(daemon, "1.1.0", **valid))
    assert (run.exit, run.stdout) == (0, b"")
    assert list(daemon.handler.pods) == ["default/r1"]


@SHIMS
async def test_version_is_answered_even_with_no_daemon(kind: str) -> None:
    env = {"CNI_COMMAND": "VERSION", "MESHWIRE_CNI_SOCKET": "/nonexistent/mwt.sock"}
    run = await run_shim(kind, env, b'{"cniVersion": "1.1.0"}')
    assert run.exit == 0
    assert run.result["supportedVersions"] == ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]


@SHIMS
async def test_stdin_that_is_not_json_is_code_6(daemon: Daemon, kind: str) -> None:
    run = await run_shim(kind, cni_env("ADD"), b"{oops", socket=daemon.socket)
    assert run.exit == 1
    assert run.result["code"] == 6
    assert daemon.handler.calls == []


@SHIMS
async def test_add_without_cni_netns_is_code_4_naming_it(daemon: Daemon, kind: str) -> None:
    env = cni_env("ADD")
    del env["CNI_NETNS"]
    run = await run_shim(kind, env, config(daemon))
    assert run.exit == 1
    assert run.result["code"] == 4
    assert "CNI_NETNS" in run.result["msg"]


@SHIMS
async def test_an_unsupported_cni_version_is_code_1(daemon: Daemon, kind: str) -> None:
    run = await run_shim(kind, cni_env("ADD"), config(daemon, "0.2.0"))
    assert run.exit == 1
    assert (run.result["code"], run.result["cniVersion"]) == (1, "1.1.0")


@SHIMS
async def test_an_unknown_command_is_code_4(daemon: Daemon, kind: str) -> None:
    run = await run_shim(kind, cni_env("REBOOT"), config(daemon))
    assert (run.exit, run.result["code"]) == (1, 4)
    assert "REBOOT" in run.result["msg"]


@SHIMS
async def test_a_dead_daemon_is_try_again_later(daemon: Daemon, kind: str) -> None:
    await daemon.endpoint.close()
    assert not exists(daemon.socket)
    run = await run_shim(kind, cni_env("ADD"), config(daemon, "0.4.0"))
    assert run.exit == 1
    assert run.result["code"] == 11
    assert run.result["cniVersion"] == "0.4.0"
    assert daemon.socket in run.result["details"]


@SHIMS
async def test_a_handler_that_times_out_fails_the_add_with_its_code(
    daemon: Daemon, kind: str
) -> None:
    daemon.handler.failures["ADD"] = CniError(
        ErrorCode.TRY_AGAIN_LATER, "pod default/r1: interfaces not ready after 30s", "eth1, eth2"
    )
    run = await run_shim(kind, cni_env("ADD"), config(daemon, prevResult=PREV_RESULT))
    assert run.exit == 1
    assert run.result == {
        "cniVersion": "1.0.0",
        "code": 11,
        "msg": "pod default/r1: interfaces not ready after 30s",
        "details": "eth1, eth2",
    }


async def test_a_handler_bug_is_an_internal_error_and_the_server_keeps_serving(
    daemon: Daemon,
) -> None:
    daemon.handler.failures["ADD"] = ZeroDivisionError("oops")  # type: ignore[assignment]
    run = await run_shim("c", cni_env("ADD"), config(daemon))
    assert (run.exit, run.result["code"]) == (1, 100)
    assert "ZeroDivisionError" in run.result["details"]
    del daemon.handler.failures["ADD"]
    assert (await run_shim("c", cni_env("ADD"), config(daemon))).exit == 0


async def test_a_slow_add_does_not_hold_up_another_pod(daemon: Daemon) -> None:
    daemon.handler.slow.add("default/r1")
    slow = asyncio.create_task(run_shim("c", cni_env("ADD"), config(daemon)))
    other = await run_shim("c", cni_env("ADD", pod="default/r2"), config(daemon))
    assert other.exit == 0
    assert "default/r2" in daemon.handler.pods
    assert not slow.done()
    daemon.handler.release.set()
    assert (await slow).exit == 0
    assert "default/r1" in daemon.handler.pods


def raw_exchange(path: str, payload: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)
        return b"".join(iter(lambda: conn.recv(65536), b""))


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        (b"", "ended after 0 bytes"),
        (b'{"v":1,"env":{}', "ended after 15 bytes"),
        (b"\xff\xfe\n", "not UTF-8"),
        (b"hello\n", "not JSON"),
        (b'{"v":9}\n', "frame version 9"),
    ],
)
async def test_malformed_frames_get_a_decode_error_and_never_kill_the_server(
    daemon: Daemon, payload: bytes, problem: str
) -> None:
    answer = await asyncio.to_thread(raw_exchange, daemon.socket, payload)
    response = json.loads(answer)
    assert response["exit"] == 1
    result = json.loads(response["stdout"])
    assert result["code"] == 6
    assert problem in result["msg"]
    assert (await run_shim("c", cni_env("ADD"), config(daemon))).exit == 0


async def test_the_socket_is_root_only(daemon: Daemon) -> None:
    info = os.stat(daemon.socket)
    assert stat.S_ISSOCK(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == os.geteuid()
    # Bound in a private directory and renamed into place; nothing else is left.
    assert os.listdir(os.path.dirname(daemon.socket)) == ["cni.sock"]


def connect_as(uid: int, path: str) -> str:
    """What connecting to `path` as `uid` gives: "connected" or the error's name."""
    script = (
        "import os, socket, sys\n"
        f"os.setgid({uid}); os.setuid({uid})\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        f"    s.connect({path!r}); print('connected')\n"
        "except OSError as e:\n"
        "    print(type(e).__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


async def test_another_user_cannot_connect(daemon: Daemon) -> None:
    # The directories on the way are open to all; only the socket's mode stops them.
    for each in (daemon.directory, daemon.directory / "run"):
        each.chmod(0o755)
    nobody = 65534
    assert await asyncio.to_thread(connect_as, nobody, daemon.socket) == "PermissionError"
    assert daemon.handler.calls == []


async def test_a_peer_of_another_uid_is_refused_unread() -> None:
    directory = temp_dir()
    path = str(directory / "cni.sock")
    handler = InMemoryHandler(in_topology={"default/r1"})
    try:
        # The endpoint admits one uid only; this test runs as another.
        async with CniEndpoint(path, handler, peer_uid=os.geteuid() + 4242):
            run = await run_shim("c", cni_env("ADD"), network_config(meshwire_socket=path))
        assert run.exit == 1
        assert run.result["code"] == ErrorCode.INTERNAL
        assert f"peer uid {os.geteuid()}" in run.result["msg"]
        assert handler.calls == []
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def test_a_socket_in_a_directory_deeper_than_an_af_unix_address_works() -> None:
    directory = temp_dir()
    deep = directory / ("d" * 60) / ("e" * 60)
    path = str(deep / "cni.sock")
    assert len(path) > 120
    handler = InMemoryHandler(in_topology={"default/r1"})
    try:
        async with CniEndpoint(path, handler):
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
            fd = os.open(deep, os.O_PATH)
            try:
                short = f"/proc/{os.getpid()}/fd/{fd}/cni.sock"  # the shim reaches ours
                run = await run_shim("c", cni_env("ADD"), network_config(), socket=short)
                assert run.exit == 0, run.result
                # A live daemon at a long path is seen as live, not removed as stale.
                with pytest.raises(EndpointError, match="another daemon is listening"):
                    await CniEndpoint(path, InMemoryHandler()).start()
            finally:
                os.close(fd)
        assert handler.calls == ["ADD(default/r1)"]
        assert not exists(path)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def test_a_stale_socket_from_a_dead_daemon_is_replaced() -> None:
    directory = temp_dir()
    path = str(directory / "cni.sock")
    try:
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(path)
        stale.close()
        async with CniEndpoint(path, InMemoryHandler(in_topology={"default/r1"})) as endpoint:
            env = cni_env("ADD")
            run = await run_shim("c", env, network_config(meshwire_socket=path))
            assert run.exit == 0
            assert endpoint.path == path
        assert not exists(path)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def test_a_live_daemon_or_a_regular_file_at_the_path_is_not_removed(daemon: Daemon) -> None:
    with pytest.raises(EndpointError, match="another daemon is listening"):
        await CniEndpoint(daemon.socket, InMemoryHandler()).start()
    regular = daemon.directory / "file.sock"
    regular.write_text("keep me")
    with pytest.raises(EndpointError, match="not a socket"):
        await CniEndpoint(str(regular), InMemoryHandler()).start()
    assert regular.read_text() == "keep me"
    assert (await run_shim("c", cni_env("ADD"), config(daemon))).exit == 0


@SHIMS
async def test_a_config_nested_beyond_any_parser_is_code_6(daemon: Daemon, kind: str) -> None:
    deep = b'{"cniVersion": "1.0.0", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    run = await run_shim(kind, cni_env("ADD"), deep, socket=daemon.socket)
    assert (run.exit, run.result["code"]) == (1, 6)
    assert (await run_shim(kind, cni_env("ADD"), config(daemon))).exit == 0


async def test_a_request_larger_than_a_frame_is_refused_with_code_6(daemon: Daemon) -> None:
    huge = b'{"cniVersion": "1.0.0", "name": "n", "x": "' + b"a" * (9 << 20) + b'"}'
    run = await run_shim("c", cni_env("ADD"), huge, socket=daemon.socket)
    assert (run.exit, run.result["code"]) == (1, 6)
    assert "larger than" in run.result["msg"]
    assert daemon.handler.calls == []


async def test_shutdown_during_a_slow_add_tells_the_runtime_to_try_again(daemon: Daemon) -> None:
    daemon.handler.slow.add("default/r1")
    slow = asyncio.create_task(run_shim("c", cni_env("ADD"), config(daemon)))
    await asyncio.wait_for(daemon.handler.waiting.wait(), 30)
    await daemon.endpoint.close(grace=0)
    run = await slow
    assert (run.exit, run.result["code"]) == (1, 11)
    assert "without answering" in run.result["msg"]
