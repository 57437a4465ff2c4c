"""Differential fuzz: the C shim (`cext/cni_shim.c`) and its Python twin
(`control/cni/shim.py`) are one program, whatever the runtime hands them.

Hypothesis draws a CNI environment, a network config on stdin and the daemon's
answer; the seeds of the shim's libFuzzer targets (`cext/fuzz/corpus/fuzz_cni_json`,
`fuzz_cni_frame`) are among the configs and answers drawn. The built C shim runs as a
process, the twin in this one, each against the same two recording daemons: one at
MESHWIRE_CNI_SOCKET, one at the config's `meshwire_socket`. Both shims must reach the
same daemon with the same request frame, byte for byte, or reach none, and print the
same bytes with the same exit code: the same answer reproduced, or the same CNI error
(the unreachable daemon's code 11 naming the same socket and cniVersion, the malformed
answer's code 5).

The configs are near-valid on purpose: members duplicated, keys and values written with
unicode escapes, empty strings, values of the wrong type, nested objects, values of
tens of KiB, bytes that are not UTF-8, invalid literals, truncated or spliced documents.

Examples per test: `MW_PROPERTY_EXAMPLES` (default 150, about 10 s); docs/fuzzing.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cni_helpers import build_c_shim, temp_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshwire.control.cni import shim
from meshwire.control.cni.frame import DEFAULT_SOCKET, SOCKET_ENV, SOCKET_FIELD

CORPUS = Path(__file__).resolve().parents[1] / "cext" / "fuzz" / "corpus"
CONFIG_SEEDS = sorted(p.read_bytes() for p in (CORPUS / "fuzz_cni_json").iterdir())
ANSWER_SEEDS = sorted(p.read_bytes() for p in (CORPUS / "fuzz_cni_frame").iterdir())

EXAMPLES = int(os.environ.get("MW_PROPERTY_EXAMPLES", "150"))
# A loaded machine may take its time over an example: no deadline, no slowness check.
DIFFERENTIAL = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- the recording daemons ---------------------------------------------------------


@dataclass
class Recorder:
    """A daemon on `path` that logs (its label, the request bytes) then answers `answer`."""

    path: str
    label: str
    log: list[tuple[str, bytes]]
    answer: list[bytes] = field(default_factory=lambda: [b'{"exit":0,"stdout":""}\n'])

    def __post_init__(self) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(self.path)
        self._sock.listen(8)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(30)
                chunks = []
                while chunk := conn.recv(65536):
                    chunks.append(chunk)
                self.log.append((self.label, b"".join(chunks)))
                # The shim may have given up (or exited) before the answer: no matter.
                with contextlib.suppress(OSError):
                    conn.sendall(self.answer[0])

    def close(self) -> None:
        self._sock.close()


@dataclass
class Node:
    """The places a shim may be pointed at: two recorders, paths with nothing (one not
    ASCII), a file that is not a socket, and a path too long for sockaddr_un."""

    root: Path
    log: list[tuple[str, bytes]] = field(repr=False)
    env_daemon: Recorder = field(repr=False)
    config_daemon: Recorder = field(repr=False)

    @property
    def targets(self) -> list[str]:
        return [
            self.env_daemon.path,
            self.config_daemon.path,
            str(self.root / "nothing.sock"),
            str(self.root / "nothing-\u00e9\x7f\U0001f600.sock"),
            str(self.root / "not-a-socket"),
            str(self.root / ("x" * 120)),
        ]

    def answer(self, data: bytes) -> None:
        self.env_daemon.answer[0] = self.config_daemon.answer[0] = data


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    if os.path.exists(DEFAULT_SOCKET):
        pytest.skip(f"a daemon listens at {DEFAULT_SOCKET}: a config without a socket reaches it")
    root = temp_dir()
    (root / "not-a-socket").write_text("")
    log: list[tuple[str, bytes]] = []
    env_daemon = Recorder(str(root / "env.sock"), "env", log)
    config_daemon = Recorder(str(root / "config.sock"), "config", log)
    yield Node(root, log, env_daemon, config_daemon)
    env_daemon.close()
    config_daemon.close()
    shutil.rmtree(root, ignore_errors=True)


# --- running both shims ------------------------------------------------------------

Outcome = tuple[list[tuple[str, bytes]], int, bytes]


def run_c(node: Node, env: dict[bytes, bytes], stdin: bytes) -> Outcome:
    node.log.clear()
    proc = subprocess.run(
        [str(build_c_shim())], env=env, input=stdin, capture_output=True, timeout=30
    )
    assert not proc.stderr, proc.stderr
    return list(node.log), proc.returncode, proc.stdout


def run_python(node: Node, env: dict[bytes, bytes], stdin: bytes) -> Outcome:
    """The twin as `shim.main` runs it: os.environ's view of the same bytes
    (surrogateescape), and its stdout written as `main` writes it."""
    node.log.clear()
    text_env = {os.fsdecode(name): os.fsdecode(value) for name, value in env.items()}
    response = shim.run(text_env, stdin)
    return list(node.log), response.exit, response.stdout.encode("utf-8", "surrogatepass")


def assert_same(node: Node, env: dict[bytes, bytes], stdin: bytes, answer: bytes) -> None:
    node.answer(answer)
    c_outcome = run_c(node, env, stdin)
    py_outcome = run_python(node, env, stdin)
    assert c_outcome == py_outcome
    frames, exit_code, _ = c_outcome
    assert len(frames) <= 1 and 0 <= exit_code <= 255


# --- what the runtime hands a shim ---------------------------------------------------

# Characters that make a scanner work: quotes, escapes, controls, non-ASCII, astral.
TRICKY = st.characters(codec="utf-8") | st.sampled_from(
    '"\\/\x00\x01\x1f\x7f\u00e9\u2028\U0001f600'
)
LITERALS = [
    b"true",
    b"false",
    b"null",
    b"0",
    b"-0",
    b"-1.5e+3",
    b"1E-7",
    b"12345678901234567890123",
]
# Not JSON, though a lenient scanner might take them.
BAD_LITERALS = [b"tru", b"nul", b"01", b"1.", b"-", b"+1", b".5", b"1e", b"NaN", b"-Infinity", b"x"]
# Nested right at the C scanner's bound (MAX_SHIM_DEPTH, 512), and past it.
DEEP = [b"[" * k + b"]" * k for k in (511, 512, 513)] + [b"[" * 512 + b"1" + b"]" * 512]


def json_string(text: str, style: str) -> bytes:
    """`text` as a JSON string: raw UTF-8, ASCII with \\u escapes, or every character
    escaped (upper-case hex, surrogate pairs, `\\/`). Lone surrogates are escaped."""
    if style == "raw":
        return json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass")
    if style == "ascii":
        return json.dumps(text).encode()
    units = text.encode("utf-16-le", "surrogatepass")
    codes = [int.from_bytes(units[i : i + 2], "little") for i in range(0, len(units), 2)]
    body = "".join("\\/" if c == ord("/") else f"\\u{c:04X}" for c in codes)
    return f'"{body}"'.encode()


styles = st.sampled_from(["raw", "raw", "ascii", "every"])


@st.composite
def strings(draw: st.DrawFn, content: st.SearchStrategy[str]) -> bytes:
    return json_string(draw(content), draw(styles))


def socket_values(node: Node) -> st.SearchStrategy[bytes]:
    """What a config may say its socket is, valid or not."""
    return st.one_of(
        strings(st.sampled_from(node.targets)),
        strings(st.sampled_from(["", "\x00", node.config_daemon.path + "\x00x"])),
        strings(st.sampled_from([node.config_daemon.path + "\ud800", "\udcff"])),
        st.just(b'"' + node.root.as_posix().encode() + b'/\xff\xfe"'),
        st.sampled_from([*LITERALS, b"{}", b"[]"]),
    )


VERSIONS = st.sampled_from(["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0", "", "1.0", "9.9.9"])
long_texts = st.builds(
    lambda s, n: s * n, st.text(TRICKY, min_size=1, max_size=3), st.integers(1, 40_000)
)
plain_values = st.one_of(
    strings(st.text(TRICKY, max_size=20)),
    strings(long_texts),
    st.sampled_from(LITERALS),
    st.sampled_from(DEEP),
)


def values(node: Node) -> st.SearchStrategy[bytes]:
    """A member's value: strings of every shape, numbers, literals, nested containers."""
    return st.recursive(
        plain_values | socket_values(node) | strings(VERSIONS),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3).map(lambda vs: b"[" + b", ".join(vs) + b"]"),
            st.lists(st.tuples(strings(st.text(TRICKY, max_size=8)), inner), max_size=3).map(
                lambda ms: b"{" + b",".join(k + b":" + v for k, v in ms) + b"}"
            ),
        ),
        max_leaves=8,
    )


KEYS = st.sampled_from(["cniVersion", SOCKET_FIELD, "name", "type", "ipam", "cniversion"])
WHITESPACE = st.sampled_from([b"", b" ", b"\n\t", b"\r\n  "])


@st.composite
def configs(draw: st.DrawFn, node: Node) -> bytes:
    """A network config: near-valid members (duplicates allowed), then perhaps broken."""
    members = draw(
        st.lists(
            st.tuples(
                strings(KEYS | st.text(TRICKY, max_size=8)),
                st.one_of(strings(VERSIONS), socket_values(node), values(node)),
            ),
            max_size=7,
        )
    )
    space = draw(WHITESPACE)
    doc = b"{" + b",".join(space + k + space + b":" + space + v for k, v in members) + b"}"
    doc = draw(WHITESPACE) + doc + draw(WHITESPACE)
    damage = draw(st.sampled_from(["none", "none", "none", "cut", "insert", "literal", "deep"]))
    if damage == "cut":
        doc = doc[: draw(st.integers(0, len(doc)))]
    elif damage == "insert":
        at = draw(st.integers(0, len(doc)))
        doc = doc[:at] + draw(st.binary(min_size=1, max_size=3)) + doc[at:]
    elif damage == "literal":
        doc = doc[:-1] + b', "z": ' + draw(st.sampled_from(BAD_LITERALS)) + b"}"
    elif damage == "deep":
        doc = doc[:-1] + b', "z": ' + draw(st.sampled_from(DEEP)) + b"}"
    return doc


def stdins(node: Node) -> st.SearchStrategy[bytes]:
    return st.one_of(
        configs(node),
        st.sampled_from(CONFIG_SEEDS),
        st.binary(max_size=64),
        st.sampled_from([b"", b" ", b"[]", b'"x"', b"{}", b"{}{}", b'{"a":1}x', b"\xef\xbb\xbf{}"]),
    )


env_names = st.binary(max_size=6).filter(lambda b: b"=" not in b and b"\x00" not in b)
env_values = st.binary(max_size=40).filter(lambda b: b"\x00" not in b) | st.text(
    TRICKY.filter(lambda c: c != "\x00"), max_size=40
).map(lambda s: s.encode("utf-8", "surrogatepass"))
COMMANDS = st.sampled_from([b"ADD", b"DEL", b"CHECK", b"STATUS", b"GC", b"VERSION", b"", b"add"])


@st.composite
def environments(draw: st.DrawFn, node: Node) -> dict[bytes, bytes]:
    """CNI_* variables (names not UTF-8 too), other variables the shims must drop, and
    perhaps MESHWIRE_CNI_SOCKET (empty counts as unset)."""
    env = draw(st.dictionaries(env_names.map(b"CNI_".__add__), env_values, max_size=6))
    env |= draw(st.dictionaries(env_names.map(b"OTHER_".__add__), env_values, max_size=2))
    if draw(st.booleans()):
        env[b"CNI_COMMAND"] = draw(COMMANDS)
    missing = [os.fsencode(path) for path in node.targets[2:]]
    sockets = [b"", os.fsencode(node.env_daemon.path), *missing, missing[0] + b"\xff\xc3"]
    if draw(st.booleans()):
        env[SOCKET_ENV.encode()] = draw(st.sampled_from(sockets))
    return env


def answers() -> st.SearchStrategy[bytes]:
    """The daemon's answer: well formed, a fuzz seed, or any bytes."""
    well_formed = st.builds(
        lambda code, text, extra: b'{"exit":%s,"stdout":%s%s}\n' % (code, text, extra),
        st.sampled_from([b"-0", b"-1", b"256", b"1.0", b"true"])
        | st.integers(0, 255).map(b"%d".__mod__),
        strings(st.text(TRICKY, max_size=40)) | st.just(b'"not \xff UTF-8"'),
        st.sampled_from([b""] + [b',"z":' + v for v in LITERALS + BAD_LITERALS + DEEP]),
    )
    any_bytes = st.binary(max_size=40).map(lambda b: b + b"\n")
    return well_formed | st.sampled_from(ANSWER_SEEDS) | any_bytes


# --- the properties -----------------------------------------------------------------


@DIFFERENTIAL
@given(data=st.data())
def test_both_shims_send_the_same_frame_to_the_same_daemon_and_print_the_same(
    node: Node, data: st.DataObject
) -> None:
    env = data.draw(environments(node), "env")
    stdin = data.draw(stdins(node), "stdin")
    answer = data.draw(answers(), "answer")
    assert_same(node, env, stdin, answer)


@pytest.mark.parametrize("seed", CONFIG_SEEDS, ids=lambda b: b[:24].decode(errors="replace"))
def test_both_shims_agree_on_every_config_seed_of_the_fuzz_target(node: Node, seed: bytes) -> None:
    # The seeds name the default socket or none: point them at the recorder instead.
    stdin = seed.replace(DEFAULT_SOCKET.encode(), node.config_daemon.path.encode())
    env = {b"CNI_COMMAND": b"ADD", b"CNI_CONTAINERID": b"c0ffee"}
    for answer in ANSWER_SEEDS:
        assert_same(node, env | {SOCKET_ENV.encode(): node.env_daemon.path.encode()}, seed, answer)
        assert_same(node, env, stdin, answer)


ADD = {b"CNI_COMMAND": b"ADD"}
TO_ENV_DAEMON = {**ADD, SOCKET_ENV.encode(): b"@ENV"}
OK = b'{"exit":0,"stdout":"ok"}\n'
# The edges of the contract (frame.py); all but NaN, 512 deep and a non-UTF-8 byte
# elsewhere made the shims disagree until fixed (issue #39). (env, stdin, answer), where
# @CONFIG, @ENV and @ROOT stand for the config's recorder, the env's and the temp dir.
REGRESSIONS = {
    "CNI_* names that are not UTF-8 sort by their bytes": (
        {**TO_ENV_DAEMON, b"CNI_\x80": b"", b"CNI_\xc2\x80": b""},
        b"{}",
        OK,
    ),
    "a config with a literal that is not JSON has no socket field": (
        ADD,
        b'{"meshwire_socket": "@CONFIG", "z": tru}',
        OK,
    ),
    "a config with a number with a leading zero has no socket field": (
        ADD,
        b'{"meshwire_socket": "@CONFIG", "z": 01}',
        OK,
    ),
    "a config with NaN has no socket field": (ADD, b'{"meshwire_socket": "@CONFIG", "z": NaN}', OK),
    "a config that is not UTF-8 has no socket field": (
        ADD,
        b'{"meshwire_socket": "@CONFIG", "x": "\xff"}',
        OK,
    ),
    "a socket path with an escaped lone surrogate is absent": (
        ADD,
        b'{"meshwire_socket": "@CONFIG\\ud800"}',
        OK,
    ),
    "a config nested 512 deep is read": (
        ADD,
        b'{"meshwire_socket": "@CONFIG", "x": ' + b"[" * 512 + b"]" * 512 + b"}",
        OK,
    ),
    "a config nested 513 deep has no socket field": (
        ADD,
        b'{"meshwire_socket": "@CONFIG", "x": ' + b"[" * 513 + b"]" * 513 + b"}",
        OK,
    ),
    "an error naming a socket path that is not ASCII is ASCII JSON": (
        {**ADD, SOCKET_ENV.encode(): "@ROOT/nothing-\u00e9\x7f\U0001f600".encode() + b"\xff"},
        b'{"cniVersion": "0.4.0"}',
        OK,
    ),
    "exit -0 is exit 0": (TO_ENV_DAEMON, b"{}", b'{"exit":-0,"stdout":"ok"}\n'),
    "an answer that is not UTF-8 is malformed": (
        TO_ENV_DAEMON,
        b"{}",
        b'{"exit":0,"stdout":"\xff"}\n',
    ),
    "an answer nested 513 deep is malformed": (
        TO_ENV_DAEMON,
        b"{}",
        b'{"exit":0,"stdout":"","x":' + b"[" * 513 + b"]" * 513 + b"}\n",
    ),
}


@pytest.mark.parametrize("case", REGRESSIONS)
def test_both_shims_agree_on_each_edge_of_the_contract(node: Node, case: str) -> None:
    env, stdin, answer = REGRESSIONS[case]

    def place(data: bytes) -> bytes:
        for name, path in (
            (b"@CONFIG", node.config_daemon.path),
            (b"@ENV", node.env_daemon.path),
            (b"@ROOT", str(node.root)),
        ):
            data = data.replace(name, path.encode())
        return data

    env = {name: place(value) for name, value in env.items()}
    assert_same(node, env, place(stdin), answer)
