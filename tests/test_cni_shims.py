"""The C shim and its Python twin are one program: same frames, same answers.

Each scenario runs both shims against a fake daemon that records the request
and answers with canned bytes, and asserts they sent the same bytes and
printed the same bytes with the same exit code.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cni_helpers import PREV_RESULT, CannedDaemon, cni_env, network_config, run_shim, temp_dir

from meshwire.control.cni.frame import DEFAULT_SOCKET

TRICKY_STDIN = [
    b"",
    b'{"cniVersion": "1.0.0", "name": "n"}',
    b'{"q": "\\"quoted\\" back\\\\slash", "ctl": "\x01\x1f\x7f", "nl": "a\nb\r\tc\x08\x0c"}',
    '{"name": "réseau-网络-\U0001f600"}'.encode(),
    b'{"name": "\xff\xfe not utf-8"}',
    b"\x00 nul and {not json",
]


@pytest.fixture
async def tmp() -> AsyncIterator[Path]:
    path = temp_dir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


Run = tuple[list[bytes], int, bytes]


async def both(tmp: Path, answer: bytes, env: dict[str, str], stdin: bytes) -> list[Run]:
    """Runs the C shim then the Python twin; returns (frames, exit, stdout) for each."""
    runs: list[Run] = []
    for kind in ("c", "python"):
        async with CannedDaemon(str(tmp / "d.sock"), answer) as daemon:
            run = await run_shim(kind, env, stdin, socket=daemon.path)
        runs.append((daemon.frames, run.exit, run.stdout))
    return runs


@pytest.mark.parametrize("stdin", TRICKY_STDIN)
async def test_both_shims_send_byte_identical_requests(tmp: Path, stdin: bytes) -> None:
    env = cni_env("ADD") | {"CNI_ARGS": 'K8S_POD_NAME=r"1\\;K8S_POD_NAMESPACE=dé\tfault'}
    c_run, py_run = await both(tmp, b'{"exit":0,"stdout":"ok"}\n', env, stdin)
    assert c_run == py_run
    frames, exit_code, stdout = c_run
    assert len(frames) == 1 and frames[0].endswith(b"\n")
    assert (exit_code, stdout) == (0, b"ok")


@pytest.mark.parametrize(
    "answer",
    [
        b'{"exit":0,"stdout":"{\\"cniVersion\\": \\"1.0.0\\"}\\n"}\n',
        b'{"exit":7,"stdout":""}\n',
        b'{"exit":255,"stdout":"x"}\n',
        b'{"stdout":"last key wins? no: first", "exit":3, "stdout":"second"}\n',
        b'  {"exit" : 0 , "stdout" : "\\u00e9\\u7f51\\ud83d\\ude00\\/\\b\\f\\r\\t"} \n',
        b'{"exit":0,"stdout":"lone \\ud800 surrogate","extra":[1,{"a":null},true,-2.5e3]}\n',
        b"",
        b'{"exit":0,"stdout":"no newline"}',
        b"not json\n",
        b'{"exit":256,"stdout":""}\n',
        b'{"exit":-1,"stdout":""}\n',
        b'{"exit":1.0,"stdout":""}\n',
        b'{"exit":01,"stdout":""}\n',
        b'{"exit":1e0,"stdout":""}\n',
        b'{"exit":true,"stdout":""}\n',
        b'{"exit":0,"stdout":5}\n',
        b'{"exit":0,"stdout":"bad \\x escape"}\n',
        b'{"exit":0,"stdout":""} trailing\n',
        b'{"exit":0,"stdout":""}\n{"exit":0,"stdout":""}\n',
        b'{"exit":0,"stdout":"x",}\n',
    ],
)
async def test_both_shims_print_the_same_for_any_answer(tmp: Path, answer: bytes) -> None:
    stdin = b'{"cniVersion": "0.4.0", "name": "n"}'
    c_run, py_run = await both(tmp, answer, cni_env("DEL"), stdin)
    assert c_run[1:] == py_run[1:]


async def test_both_shims_answer_version_alone_byte_identically(tmp: Path) -> None:
    env = {"CNI_COMMAND": "VERSION", "MESHWIRE_CNI_SOCKET": str(tmp / "none.sock")}
    c_run = await run_shim("c", env, b'{"cniVersion": "1.0.0"}')
    py_run = await run_shim("python", env, b'{"cniVersion": "1.0.0"}')
    assert (c_run.exit, c_run.stdout) == (py_run.exit, py_run.stdout)
    assert c_run.result["supportedVersions"] == ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]


@pytest.mark.parametrize(
    "socket",
    ["nonexistent.sock", "not-a-socket", "x" * 120],
)
async def test_both_shims_report_an_unreachable_daemon_identically(tmp: Path, socket: str) -> None:
    (tmp / "not-a-socket").write_text("")
    path = str(tmp / socket)
    config = network_config("0.4.0", prevResult=PREV_RESULT, meshwire_socket=path)
    c_run = await run_shim("c", cni_env("ADD"), config)
    py_run = await run_shim("python", cni_env("ADD"), config)
    assert (c_run.exit, c_run.stdout) == (py_run.exit, py_run.stdout)
    assert c_run.exit == 1
    assert c_run.result["code"] == 11
    assert c_run.result["cniVersion"] == "0.4.0"
    assert c_run.result["details"].startswith(path)


async def test_both_shims_survive_a_config_nested_beyond_any_parser(tmp: Path) -> None:
    deep = b'{"cniVersion": "0.4.0", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    env = cni_env("ADD") | {"MESHWIRE_CNI_SOCKET": str(tmp / "none.sock")}
    c_run = await run_shim("c", env, deep)
    py_run = await run_shim("python", env, deep)
    assert (c_run.exit, c_run.stdout) == (py_run.exit, py_run.stdout)
    assert c_run.result["code"] == 11


async def test_an_empty_cni_version_is_as_good_as_none(tmp: Path) -> None:
    config = network_config("", meshwire_socket=str(tmp / "none.sock"))
    c_run = await run_shim("c", cni_env("ADD"), config)
    py_run = await run_shim("python", cni_env("ADD"), config)
    assert (c_run.exit, c_run.stdout) == (py_run.exit, py_run.stdout)
    assert c_run.exit == 1
    assert c_run.result["code"] == 11
    assert c_run.result["cniVersion"] == "1.1.0"  # the latest, as for no cniVersion


async def test_an_empty_socket_field_falls_back_to_the_default_not_to_an_earlier_field(
    tmp: Path,
) -> None:
    # A daemon at the relative path the previous field's value ("0.4.0") names: a shim
    # that reuses that value as the socket would reach it.
    stdin = json.dumps(network_config("0.4.0", meshwire_socket="")).encode()
    env = cni_env("ADD")
    runs = []
    for kind in ("c", "python"):
        async with CannedDaemon(str(tmp / "0.4.0")) as stale:
            runs.append(await run_shim(kind, env, stdin, cwd=tmp))
        assert stale.frames == [], kind
    c_run, py_run = runs
    assert (c_run.exit, c_run.stdout) == (py_run.exit, py_run.stdout)
    if c_run.exit:  # nothing at the default socket on this machine
        assert c_run.result["details"].startswith(DEFAULT_SOCKET)
