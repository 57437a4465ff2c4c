"""Property tests (Hypothesis) of the wire preface's receiving side (dataplane/preface.py):
whatever bytes a peer without the key sends before it closes, the receiver refuses with
PrefaceError (or gives up at its deadline), never says ACCEPTED, and reads nothing past
the preface it was reading.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshwire.dataplane import preface

KEY = bytes(range(32))
# The receiver's hello (MAGIC, nonce, name length, "node-b") and its MAC.
REPLY = len(preface.MAGIC) + preface.NONCE + 1 + len(b"node-b") + preface.MAC

# A loaded machine may take its time over an example: no deadline, no slowness check.
PATIENT = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def hellos() -> st.SearchStrategy[bytes]:
    """Hellos that pass the first checks, then anything: where a parser would break."""
    start = st.sampled_from(
        [b"", preface.MAGIC, preface.MAGIC + preface.key_id(KEY), preface.HTTP2_START]
    )
    return st.builds(bytes.__add__, start, st.binary(max_size=120))


async def receive(data: bytes, keys: preface.Keyring) -> tuple[BaseException | None, bytes]:
    left, right = socket.socketpair()
    with left, right:
        right.setblocking(False)
        left.sendall(data)
        left.shutdown(socket.SHUT_WR)
        try:
            await preface.as_receiver(right, keys, "node-b", within=5.0)
        except BaseException as exc:
            outcome: BaseException | None = exc
        else:
            outcome = None
        right.close()
        answered = b""
        left.settimeout(5)
        # Closed with our bytes unread, the receiver's side resets: the end, too.
        with contextlib.suppress(ConnectionResetError):
            while chunk := left.recv(4096):
                answered += chunk
    return outcome, answered


@settings(PATIENT, max_examples=150)
@given(hellos())
def test_any_bytes_without_the_key_are_refused_with_a_preface_error(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    path = tmp_path_factory.mktemp("keys") / "wire.key"
    path.write_text(KEY.hex() + "\n")
    outcome, answered = asyncio.run(receive(data, preface.Keyring(str(path))))
    assert isinstance(outcome, preface.PrefaceError), outcome
    # Nothing, or its hello and MAC; never the ACCEPTED byte after them.
    assert len(answered) in (0, REPLY)
