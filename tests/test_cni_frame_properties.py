"""Property tests (Hypothesis) of the CNI frame protocol (control/cni/frame.py): any
environment and stdin survive a request's round trip, and any bytes a shim or a daemon
may send are either read or refused with the protocol's own error, never a crash.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshwire.control.cni import frame
from meshwire.control.cni.protocol import CniError, ErrorCode, Response

names = st.text(st.characters(codec="utf-8", exclude_characters="="), min_size=1, max_size=12)
envs = st.dictionaries(st.one_of(names.map("CNI_".__add__), names), st.text(max_size=30))
stdins = st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode))

# A loaded machine may take its time over an example: no deadline, no slowness check.
PATIENT = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(PATIENT)
@given(envs, stdins)
def test_a_request_is_one_line_and_decodes_to_its_cni_variables_and_stdin(
    env: dict[str, str], stdin: bytes
) -> None:
    encoded = frame.encode_request(env, stdin)
    assert encoded.endswith(b"\n") and encoded.count(b"\n") == 1
    try:
        request = frame.decode_request(encoded)
    except CniError as exc:  # stdin (or a variable) that is not UTF-8: refused, code 6
        assert exc.code == ErrorCode.DECODE_FAILURE
        assert any(not _utf8(text) for text in (stdin, *map(str.encode, env.values())))
        return
    assert dict(request.env) == {k: v for k, v in env.items() if k.startswith("CNI_")}
    assert request.stdin.encode() == stdin


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@settings(PATIENT)
@given(st.binary(max_size=300))
def test_any_request_bytes_decode_or_are_refused_with_code_6(data: bytes) -> None:
    try:
        frame.decode_request(data)
    except CniError as exc:
        assert exc.code == ErrorCode.DECODE_FAILURE


def _answer(code: int, stdout: str) -> bytes:
    return json.dumps({"exit": code, "stdout": stdout}).encode() + b"\n"


@settings(PATIENT)
@given(st.integers(0, 255), st.text(max_size=200))
def test_a_response_round_trips_through_the_shims_reading(code: int, stdout: str) -> None:
    encoded = frame.encode_response(Response(code, stdout))
    assert encoded.isascii() and encoded.count(b"\n") == 1
    assert frame.shim_outcome(encoded, "/run/x.sock", "1.0.0") == Response(code, stdout)


@settings(PATIENT)
@given(st.one_of(st.binary(max_size=300), st.builds(_answer, st.integers(-2, 300), st.text())))
def test_any_answer_bytes_are_reproduced_or_become_a_cni_error(data: bytes) -> None:
    outcome = frame.shim_outcome(data, "/run/x.sock", "1.0.0")
    try:
        body = json.loads(data) if data.endswith(b"\n") else None
    except ValueError:
        body = None
    code = body.get("exit") if isinstance(body, dict) else None
    stdout = body.get("stdout") if isinstance(body, dict) else None
    if type(code) is int and 0 <= code <= 255 and isinstance(stdout, str):
        assert outcome == Response(code, stdout)
    else:
        assert outcome.exit == 1
        assert json.loads(outcome.stdout)["code"] in (
            ErrorCode.IO_FAILURE,
            ErrorCode.TRY_AGAIN_LATER,
        )
