"""The wire's record layer (cext/seal.h), through cffi: the format is what its header
says, checked against an independent AES-GCM and HKDF (the `cryptography` package),
and its properties hold for any payloads and any split (Hypothesis).

- sealed by C, opened by `cryptography` with keys derived as documented, and back;
- any stream of honest records opens to exactly the payloads, however it is cut;
- a flipped byte, a replayed, dropped or reordered record, or the other direction's
  records deliver nothing from that record on, and the opener says so;
- bytes from someone without the keys never open.
"""

from __future__ import annotations

import itertools
import struct
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshwire.dataplane._wirec import ffi, lib

KEY = bytes(range(32))
TRANSCRIPT = b"MWWIRE2\0 both hellos of one preface"
LABEL = b"meshwire wire records v2"
HEAD, TAG = int(lib.MW_SEAL_HEAD), int(lib.MW_SEAL_TAG)

payloads = st.lists(st.binary(max_size=300), min_size=1, max_size=6)

# A loaded machine may take its time over an example: no deadline, no slowness check.
PATIENT = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Seal:
    """One side's record keys (opener: the side that opened the connection)."""

    def __init__(self, opener: bool, encrypt: bool = True, transcript: bytes = TRANSCRIPT):
        self.handle: Any = lib.mw_seal_new(
            KEY, len(KEY), transcript, len(transcript), int(opener), int(encrypt)
        )
        assert self.handle != ffi.NULL
        self.got: list[bytes] = []

        @ffi.callback("void(void *, const uint8_t *, size_t)")
        def deliver(ctx: Any, payload: Any, length: int) -> None:
            self.got.append(bytes(ffi.buffer(payload, length)))

        self._deliver = deliver

    def seal(self, payload: bytes) -> bytes:
        out = ffi.new("uint8_t[]", int(lib.mw_seal_size(len(payload))))
        parts = ffi.new("const uint8_t *[1]", [ffi.from_buffer(payload)])
        lens = ffi.new("size_t[1]", [len(payload)])
        n = int(lib.mw_seal_parts(self.handle, parts, lens, 1, out))
        assert n == len(out)
        return bytes(out)

    def open(self, data: bytes) -> int:
        buf = ffi.new("uint8_t[]", data) if data else ffi.new("uint8_t[1]")
        return int(lib.mw_seal_open(self.handle, buf, len(data), self._deliver, ffi.NULL))

    def __del__(self) -> None:
        lib.mw_seal_free(self.handle)


def keys() -> tuple[bytes, bytes, bytes, bytes]:
    """(forth key, forth IV, back key, back IV), as seal.h documents their derivation."""
    material = HKDF(hashes.SHA256(), 88, TRANSCRIPT, LABEL).derive(KEY)
    return material[:32], material[32:44], material[44:76], material[76:88]


def nonce(iv: bytes, n: int) -> bytes:
    return iv[:4] + bytes(a ^ b for a, b in zip(iv[4:], n.to_bytes(8, "big"), strict=True))


def test_records_are_aes_256_gcm_under_hkdf_keys_as_the_header_documents() -> None:
    forth_key, forth_iv, back_key, back_iv = keys()
    sender, receiver = Seal(opener=True), Seal(opener=False)
    for n, payload in enumerate((b"first", b"", b"third" * 50)):
        record = sender.seal(payload)
        head, body = record[:HEAD], record[HEAD:]
        assert struct.unpack("!I", head)[0] == len(payload) + TAG
        assert AESGCM(forth_key).decrypt(nonce(forth_iv, n), body, head) == payload
    answer = AESGCM(back_key).encrypt(nonce(back_iv, 0), b"from the receiver", None)
    head = struct.pack("!I", len(answer))
    answer = AESGCM(back_key).encrypt(nonce(back_iv, 0), b"from the receiver", head)
    assert sender.open(head + answer) == 0
    assert sender.got == [b"from the receiver"]
    another = Seal(opener=True)
    assert receiver.open(another.seal(b"a") + another.seal(b"b")) == 0
    assert receiver.got == [b"a", b"b"]


def test_without_encryption_the_payload_is_in_the_clear_and_still_authenticated() -> None:
    forth_key, forth_iv, _, _ = keys()
    record = Seal(opener=True, encrypt=False).seal(b"visible payload")
    head, body = record[:HEAD], record[HEAD:]
    assert body[:-TAG] == b"visible payload"
    # GMAC: the payload is additional data of an empty encryption.
    assert AESGCM(forth_key).decrypt(nonce(forth_iv, 0), body[-TAG:], head + body[:-TAG]) == b""
    altered = record[:HEAD] + b"V" + record[HEAD + 1 :]
    receiver = Seal(opener=False, encrypt=False)
    assert receiver.open(altered) == -1
    assert receiver.got == []


@settings(PATIENT, max_examples=200)
@given(payloads, st.lists(st.integers(min_value=0), max_size=8), st.booleans())
def test_honest_records_open_to_their_payloads_however_the_stream_is_cut(
    sent: list[bytes], cuts: list[int], encrypt: bool
) -> None:
    sender, receiver = Seal(True, encrypt), Seal(False, encrypt)
    stream = b"".join(map(sender.seal, sent))
    points = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    for start, end in itertools.pairwise(points):
        assert receiver.open(stream[start:end]) == 0
    assert receiver.got == sent
    assert int(lib.mw_seal_opened(receiver.handle)) == len(sent)


@settings(PATIENT, max_examples=200)
@given(payloads, st.integers(min_value=0), st.integers(min_value=1, max_value=255))
def test_a_flipped_byte_delivers_nothing_from_its_record_on(
    sent: list[bytes], where: int, mask: int
) -> None:
    sender, receiver = Seal(True), Seal(False)
    records = [sender.seal(p) for p in sent]
    stream = bytearray(b"".join(records))
    where %= len(stream)
    stream[where] ^= mask
    hit = next(i for i, end in enumerate(_ends(records)) if where < end)
    result = receiver.open(bytes(stream))
    assert receiver.got == sent[:hit]
    start = _ends(records)[hit - 1] if hit else 0
    if where >= start + HEAD:
        assert result == -1
    # else a flipped length may also leave the opener waiting for bytes that never come.


def _ends(records: list[bytes]) -> list[int]:
    ends, total = [], 0
    for record in records:
        total += len(record)
        ends.append(total)
    return ends


@settings(PATIENT, max_examples=100)
@given(payloads, st.data())
def test_replayed_dropped_or_reordered_records_fail(sent: list[bytes], data: st.DataObject) -> None:
    sender = Seal(True)
    records = [sender.seal(p) for p in [*sent, b"last"]]
    i = data.draw(st.integers(0, len(records) - 2))
    attack = data.draw(st.sampled_from(["replay", "drop", "swap"]))
    if attack == "replay":
        tampered = [*records[: i + 1], records[i], *records[i + 1 :]]
    elif attack == "drop":
        tampered = records[:i] + records[i + 1 :]
    else:
        tampered = [*records[:i], records[i + 1], records[i], *records[i + 2 :]]
    receiver = Seal(False)
    assert receiver.open(b"".join(tampered)) == -1
    assert int(lib.mw_seal_broken(receiver.handle)) == 1
    delivered = receiver.got
    assert delivered == ([*sent, b"last"])[: len(delivered)]
    assert len(delivered) <= i + 1


def test_records_of_the_other_direction_or_another_connection_fail() -> None:
    mine = Seal(True).seal(b"hello")
    assert Seal(True).open(mine) == -1  # my own records, reflected back at me
    other = Seal(True, transcript=TRANSCRIPT + b"!").seal(b"hello")
    assert Seal(False).open(other) == -1


@settings(PATIENT, max_examples=300)
@given(st.binary(max_size=400))
def test_bytes_from_someone_without_the_keys_never_open(stream: bytes) -> None:
    receiver = Seal(False)
    receiver.open(stream)
    assert receiver.got == []


def test_a_length_past_the_limit_fails_at_once() -> None:
    receiver = Seal(False)
    too_long = int(lib.MW_SEAL_PAYLOAD_MAX) + TAG + 1
    assert receiver.open(struct.pack("!I", too_long)) == -1
    assert Seal(False).open(struct.pack("!I", TAG - 1)) == -1
