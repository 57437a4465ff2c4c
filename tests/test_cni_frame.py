"""The frame between shim and daemon, and what a shim decides on its own: pure."""

from __future__ import annotations

import json

import pytest

from meshwire.control.cni.frame import (
    DEFAULT_SOCKET,
    decode_request,
    encode_request,
    encode_response,
    error_version,
    shim_outcome,
    socket_path,
    unreachable,
)
from meshwire.control.cni.protocol import CniError, ErrorCode, Response


def test_a_request_carries_only_the_cni_variables_sorted_and_stdin_verbatim() -> None:
    env = {"PATH": "/bin", "CNI_NETNS": "/n", "CNI_COMMAND": "ADD", "HOME": "/root"}
    frame = encode_request(env, b'{"a": "line\n\ttab \\ \\"q\\""}')
    assert frame.endswith(b"\n")
    assert frame.count(b"\n") == 1
    assert frame.startswith(b'{"v":1,"env":{"CNI_COMMAND":"ADD","CNI_NETNS":"/n"},"stdin":')
    decoded = decode_request(frame)
    assert decoded.env == {"CNI_COMMAND": "ADD", "CNI_NETNS": "/n"}
    assert decoded.stdin == '{"a": "line\n\ttab \\ \\"q\\""}'


def test_non_ascii_stdin_round_trips() -> None:
    stdin = '{"name": "réseau-网络-\U0001f600"}'.encode()
    assert decode_request(encode_request({}, stdin)).stdin == stdin.decode()


def test_stdin_that_is_not_utf8_reaches_the_daemon_and_is_code_6() -> None:
    frame = encode_request({"CNI_COMMAND": "ADD"}, b'{"name": "\xff\xfe"}')
    assert b"\xff\xfe" in frame
    with pytest.raises(CniError) as caught:
        decode_request(frame)
    assert caught.value.code == ErrorCode.DECODE_FAILURE
    assert "not UTF-8" in caught.value.msg


@pytest.mark.parametrize(
    ("frame", "problem"),
    [
        (b"garbage\n", "is not JSON"),
        (b"[1]\n", "frame version None"),
        (b'{"v":2,"env":{},"stdin":""}\n', "frame version 2"),
        (b'{"v":1,"env":[],"stdin":""}\n', "'env'"),
        (b'{"v":1,"env":{"CNI_X":1},"stdin":""}\n', "'env'"),
        (b'{"v":1,"env":{}}\n', "'stdin'"),
    ],
)
def test_a_malformed_request_frame_is_code_6_saying_what_is_wrong(
    frame: bytes, problem: str
) -> None:
    with pytest.raises(CniError) as caught:
        decode_request(frame)
    assert caught.value.code == ErrorCode.DECODE_FAILURE
    assert problem in caught.value.msg


def test_a_response_frame_is_one_ascii_line_whatever_the_text() -> None:
    text = '{"x": "é\n\ud800"}\n'
    frame = encode_response(Response(exit=1, stdout=text))
    assert frame.isascii()
    assert frame.count(b"\n") == 1
    assert shim_outcome(frame, "/s", "1.0.0") == Response(exit=1, stdout=text)


@pytest.mark.parametrize("answer", [b"", b'{"exit":0,"stdout":"x"}'])
def test_no_complete_answer_is_try_again_later_naming_the_socket(answer: bytes) -> None:
    outcome = shim_outcome(answer, "/run/x.sock", "0.4.0")
    assert outcome.exit == 1
    assert json.loads(outcome.stdout) == {
        "cniVersion": "0.4.0",
        "code": 11,
        "msg": "meshwire daemon closed the connection without answering",
        "details": "socket /run/x.sock",
    }


@pytest.mark.parametrize(
    "answer",
    [
        b"nonsense\n",
        b'{"exit":0}\n',
        b'{"stdout":""}\n',
        b'{"exit":256,"stdout":""}\n',
        b'{"exit":-1,"stdout":""}\n',
        b'{"exit":1.0,"stdout":""}\n',
        b'{"exit":true,"stdout":""}\n',
        b'{"exit":"0","stdout":""}\n',
        b'{"exit":0,"stdout":7}\n',
        b'{"exit":0,"stdout":""}\n{"exit":0,"stdout":""}\n',
    ],
)
def test_a_malformed_answer_is_an_io_failure(answer: bytes) -> None:
    outcome = shim_outcome(answer, "/s", "1.1.0")
    assert outcome.exit == 1
    result = json.loads(outcome.stdout)
    assert (result["code"], result["msg"]) == (5, "malformed answer from the meshwire daemon")


def test_unreachable_is_try_again_later_with_the_reason() -> None:
    result = json.loads(unreachable("/s", "Connection refused", "1.0.0").stdout)
    assert (result["code"], result["details"]) == (11, "/s: Connection refused")


def test_the_socket_comes_from_env_then_config_then_default() -> None:
    config = b'{"cniVersion": "1.0.0", "meshwire_socket": "/from/config"}'
    assert socket_path({"MESHWIRE_CNI_SOCKET": "/from/env"}, config) == "/from/env"
    assert socket_path({"MESHWIRE_CNI_SOCKET": ""}, config) == "/from/config"
    assert socket_path({}, b'{"cniVersion": "1.0.0"}') == DEFAULT_SOCKET
    assert socket_path({}, b"not json") == DEFAULT_SOCKET
    assert socket_path({}, b'{"meshwire_socket": 5}') == DEFAULT_SOCKET
    assert socket_path({}, b'{"nested": {"meshwire_socket": "/no"}}') == DEFAULT_SOCKET


def test_an_error_result_uses_the_config_version_only_when_supported() -> None:
    assert error_version(b'{"cniVersion": "0.3.1"}') == "0.3.1"
    assert error_version(b'{"cniVersion": "9.9.9"}') == "1.1.0"
    assert error_version(b"{broken") == "1.1.0"
