"""Writes the fuzz targets' seed corpora (cext/fuzz/corpus/<target>/): a few small,
well-formed inputs each, so a short run starts past the format's first checks.

Run from anywhere: `python cext/fuzz/make_seeds.py`. The seeds are committed; this
script says how they were made and remakes them byte for byte.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"
HTTP2_MAGIC = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def batch(*frames: tuple[int, bytes]) -> bytes:
    return b"".join(struct.pack("!IH", wire_id, len(frame)) + frame for wire_id, frame in frames)


def varint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def message(packed: bytes) -> bytes:
    """A gRPC message holding Batch{frames: packed}."""
    body = b"\x0a" + varint(len(packed)) + packed
    return b"\x00" + struct.pack("!I", len(body)) + body


def h2_frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return (
        struct.pack("!I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack("!I", stream)
        + payload
    )


def literal(name: str, value: str) -> bytes:
    """An HPACK literal header field without indexing, no Huffman coding."""
    return b"\x00" + bytes([len(name)]) + name.encode() + bytes([len(value)]) + value.encode()


def frames_call(payload: bytes, namespace: str = "lab") -> bytes:
    """A client's Wire/Frames call: SETTINGS, HEADERS, DATA, and the end of its side."""
    headers = b"".join(
        literal(name, value)
        for name, value in (
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/meshwire.v1.Wire/Frames"),
            (":authority", "node:51112"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("meshwire-namespace", namespace),
        )
    )
    return (
        h2_frame(4, 0, 0, b"")
        + h2_frame(1, 4, 1, headers)
        + h2_frame(0, 0, 1, payload)
        + h2_frame(0, 1, 1, b"")
    )


FRAME = bytes(10) + b"\xff" * 6 + b"\x02\xaa\x00\x00\x00\x01\x88\xb5" + bytes(46)


def emul_params(
    delay_ns: int = 0, jitter_ns: int = 0, loss: int = 0, corrupt: int = 0,
    duplicate: int = 0, reorder: int = 0, rate: int = 0,
) -> bytes:  # fmt: skip
    """mw_emul_params as the target reads it: the struct's bytes on this machine."""
    return struct.pack("<QQIIIIQ", delay_ns, jitter_ns, loss, corrupt, duplicate, reorder, rate)


def emul_run(params: bytes, *ops: bytes, max_frames: int = 999, max_bytes: int = 1 << 20) -> bytes:
    """fuzz_emul's input: seed, limits, parameters, then the operations."""
    return struct.pack("!QHI", 1, max_frames - 1, max_bytes) + params + b"".join(ops)


def push(length: int, skip: int = 12, dt_us: int = 10) -> bytes:
    return b"\x00" + struct.pack("!HBH", length, skip, dt_us)


def pop(cap: int = 4096, dt_us: int = 1000) -> bytes:
    return b"\x01" + struct.pack("!HH", cap, dt_us)


def seeds() -> dict[str, dict[str, bytes]]:
    two = message(batch((1, FRAME), (7, FRAME[:20])))
    return {
        "fuzz_batchdec": {
            "one-message": b"\x80" + two,
            "two-messages-split": b"\x40" + two + message(batch((1, b""))),
            "compressed": b"\x00" + b"\x01" + two[1:],
            "unknown-field": b"\x10" + b"\x00\x00\x00\x00\x03\x10\x96\x01",
        },
        "fuzz_seal": {
            "honest": b"\x01\x80" + b"a payload split into two records",
            "honest-encrypted-flipped": b"\x07\x40" + FRAME,
            "forged": b"\x00\x10" + struct.pack("!I", 20) + bytes(20),
            "oversized": b"\x00\x00" + b"\xff\xff\xff\xff",
        },
        "fuzz_receiver": {
            "frames-call": b"\x01" + frames_call(two),
            "other-namespace": b"\x01" + frames_call(two, "other"),
            "no-magic": b"\x00" + HTTP2_MAGIC + frames_call(message(batch((1, FRAME))))[:40],
            "ping-goaway": b"\x01" + h2_frame(6, 0, 0, bytes(8)) + h2_frame(7, 0, 0, bytes(8)),
        },
        "fuzz_cni_json": {
            "config": json.dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": "k8s",
                    "type": "meshnet",
                    "meshwire_socket": "/run/meshwire/cni.sock",
                    "ipam": {"a": [1, 2.5, None]},
                }
            ).encode(),
            "escapes": b'{"cniVersion": "0.4\\u002e0", "x": "\\ud83d\\ude00\\n", "y": true}',
            "empty-strings": b'{"cniVersion": "", "meshwire_socket": ""}',
            "nested": b'{"a": [[[{"b": {}}]]], "cniVersion": "1.1.0"}',
        },
        "fuzz_emul": {
            "delay-jitter": emul_run(
                emul_params(delay_ns=2_000_000, jitter_ns=500_000),
                *(push(64 + n) for n in range(8)),
                *(pop() for _ in range(8)),
            ),
            "loss-duplicate-reorder": emul_run(
                emul_params(loss=100_000, duplicate=200_000, reorder=300_000, corrupt=50_000),
                *(push(1500) + pop(dt_us=1) for _ in range(16)),
            ),
            "rate-then-clear": emul_run(
                emul_params(rate=125_000),
                *(push(1500, dt_us=0) for _ in range(12)),
                b"\x02" + emul_params(),
                b"\x03" + struct.pack("!I", 200_000),
                pop(),
                pop(cap=100),
            ),
            "full-queue": emul_run(
                emul_params(delay_ns=10**9), *(push(100, dt_us=0) for _ in range(6)), max_frames=4
            ),
        },
        "fuzz_cni_frame": {
            "ok": b'{"exit": 0, "stdout": "{\\"cniVersion\\": \\"1.0.0\\"}"}\n',
            "error": b'{"exit": 1, "stdout": "{\\"code\\": 11, \\"msg\\": \\"\\u00e9\\"}"}\n',
            "no-newline": b'{"exit": 0, "stdout": ""}',
            "big-exit": b'{"stdout": "", "exit": 256}\n',
        },
    }


def main() -> None:
    for target, files in seeds().items():
        folder = CORPUS / target
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (folder / name).write_bytes(data)


if __name__ == "__main__":
    main()
