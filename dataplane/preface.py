"""The Wire stream's authenticated preface: both ends prove they hold a cluster wire key
and agree the keys that seal the rest of the connection.

Before any HTTP/2 byte, on every new connection (config `auth.wire_key`):

    sender   -> receiver  MAGIC, key id (8), sender nonce (32), mode (1), len (1),
                          sender node name
    receiver -> sender    MAGIC, receiver nonce (32), len (1), receiver node name,
                          HMAC-SHA256(key, "receiver" | transcript)
    sender   -> receiver  HMAC-SHA256(key, "sender" | transcript)
    receiver -> sender    ACCEPTED (1 byte)

The transcript is every byte before the MAC (both hellos), so each MAC is bound
to this connection's two fresh nonces, both node names and the mode: a recorded
preface replays nowhere, and neither MAC answers the other's question. The key
id (SHA-256 of the key, 8 bytes) tells the receiver which of its keys the sender
uses, so during a rotation a receiver accepts the old key and the new. A
receiver that lacks the key, or gets a wrong MAC, closes the connection without
a byte of HTTP/2 having been read: a peer without the key never puts a frame on
a TAP.

After ACCEPTED every byte, both ways, travels in records sealed with AES-256-GCM
under keys derived from the key and the transcript (cext/seal.h, `Session`): an
attacker on the path who relays the preface can neither inject, alter, replay
nor reorder a byte after it. The mode is the sender's (config
`auth.wire_encrypt`): ENCRYPT seals and encrypts, INTEGRITY seals in the clear;
a receiver accepts both, since both protect integrity.

A node's name here is its address as its peers dial it: the receiver binds the
stream to the sender's (it delivers only to wires whose far end is on that
node), and the sender checks that the receiver's is the one it dialled.

Keys are re-read when their file changes (its inode, size or mtime), so a new
connection uses the new keys and connections already made keep theirs.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass

# Version 2: records after the preface are sealed, and the hello carries the mode.
MAGIC = b"MWWIRE2\0"
NONCE = 32
MAC = 32
KEY_ID = 8
ACCEPTED = b"\x01"
# The sender's mode byte.
INTEGRITY = 0
ENCRYPT = 1
# What an HTTP/2 client sends first: a connection starting with it skipped the preface.
HTTP2_START = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
NAME_MAX = 255
# A preface not finished within this is given up (a peer that stalls); one round trip
# between nodes takes far less, even across a loaded underlay.
TIMEOUT = 2.0
# A refused peer address is logged once per this many seconds at most.
LOG_EVERY = 60.0

log = logging.getLogger(__name__)


class PrefaceError(OSError):
    """The preface failed: the peer is not trusted, or the connection broke."""


class PlainHttp2(PrefaceError):
    """The peer started HTTP/2 at once: a stock gRPC client, or a node with auth off."""


@dataclass(frozen=True, slots=True)
class Session:
    """What a passed preface established: the peer's node name, and what seals the
    connection's records (cext/seal.h)."""

    peer: str
    key: bytes
    transcript: bytes
    encrypt: bool

    def seal_args(self) -> tuple[bytes, int, bytes, int, int]:
        """What mw_sender_seal and mw_receiver_seal (cext/h2wire.h) take after the call."""
        return self.key, len(self.key), self.transcript, len(self.transcript), int(self.encrypt)


def key_id(key: bytes) -> bytes:
    return hashlib.sha256(b"meshwire wire key id\0" + key).digest()[:KEY_ID]


def parse_keys(text: str, where: str) -> list[bytes]:
    """The keys of a wire key file: hex, one per line, '#' comments; at least one, each
    of 16 bytes or more. Raises ValueError naming `where`."""
    keys = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            key = bytes.fromhex(line)
        except ValueError:
            raise ValueError(f"{where}: line {number} is not a hex key") from None
        if len(key) < 16:
            raise ValueError(f"{where}: line {number}: a key needs 16 bytes or more")
        keys.append(key)
    if not keys:
        raise ValueError(f"{where}: no key in the file")
    return keys


class Keyring:
    """The wire keys of one file, re-read when the file changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._keys: list[bytes] = []
        self._problem = ""  # why the file was last unusable, logged once
        self.reload()

    def reload(self) -> bool:
        """Reads the file if it changed; returns whether the keys changed. Raises
        ValueError (naming the file) only if no keys were ever read; later a bad file
        is logged and the keys in use are kept."""
        try:
            stat = os.stat(self.path)
            stamp = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
            if stamp == self._stamp:
                return False
            with open(self.path) as f:
                keys = parse_keys(f.read(), self.path)
        except (OSError, ValueError) as exc:
            why = f"{self.path}: {exc.strerror}" if isinstance(exc, OSError) else str(exc)
            if not self._keys:
                raise ValueError(why) from None
            if why != self._problem:
                log.warning("wire keys: %s; keeping the keys read before", why)
            self._problem = why
            return False
        self._problem = ""
        with self._lock:
            changed = keys != self._keys
            self._keys, self._stamp = keys, stamp
        if changed:
            log.info("wire keys: read %d from %s", len(keys), self.path)
        return changed

    def sending(self) -> bytes:
        """The key new streams are opened with."""
        self.reload()
        with self._lock:
            return self._keys[0]

    def by_id(self, wanted: bytes) -> bytes | None:
        self.reload()
        with self._lock:
            for key in self._keys:
                if hmac.compare_digest(key_id(key), wanted):
                    return key
        return None


def _mac(key: bytes, role: bytes, transcript: bytes) -> bytes:
    return hmac.new(key, role + b"\0" + transcript, hashlib.sha256).digest()


def _hello_name(name: str) -> bytes:
    raw = name.encode()[:NAME_MAX]
    return bytes([len(raw)]) + raw


async def _read(sock: socket.socket, n: int) -> bytes:
    """Exactly n bytes (never more: what follows the preface is the HTTP/2 stream's)."""
    loop = asyncio.get_running_loop()
    data = b""
    while len(data) < n:
        chunk = await loop.sock_recv(sock, n - len(data))
        if not chunk:
            raise PrefaceError(
                "the peer closed the connection during the preface (does it hold the wire key, "
                "with auth.enabled?)"
            )
        data += chunk
    return data


async def as_sender(
    sock: socket.socket, keys: Keyring, node: str, encrypt: bool = True, within: float = TIMEOUT
) -> Session:
    """Runs the sender's side on a connected nonblocking socket, asking for records
    encrypted or not; returns the session. Raises PrefaceError if the receiver is not
    trusted or refuses, TimeoutError after `within` seconds."""
    return await asyncio.wait_for(_as_sender(sock, keys, node, encrypt), within)


async def _as_sender(sock: socket.socket, keys: Keyring, node: str, encrypt: bool) -> Session:
    loop = asyncio.get_running_loop()
    key = keys.sending()
    mode = bytes([ENCRYPT if encrypt else INTEGRITY])
    hello = MAGIC + key_id(key) + secrets.token_bytes(NONCE) + mode + _hello_name(node)
    await loop.sock_sendall(sock, hello)
    head = await _read(sock, len(MAGIC) + NONCE + 1)
    if head[: len(MAGIC)] != MAGIC:
        raise PrefaceError("the receiver does not speak the authenticated wire preface")
    name = await _read(sock, head[-1])
    transcript = hello + head + name
    if not hmac.compare_digest(await _read(sock, MAC), _mac(key, b"receiver", transcript)):
        raise PrefaceError("the receiver failed to prove it holds the wire key")
    await loop.sock_sendall(sock, _mac(key, b"sender", transcript))
    try:
        verdict = await _read(sock, 1)
    except PrefaceError:
        raise PrefaceError("the receiver refused the wire key") from None
    if verdict != ACCEPTED:
        raise PrefaceError("the receiver refused the preface")
    return Session(name.decode(errors="replace"), key, transcript, encrypt)


async def as_receiver(
    sock: socket.socket, keys: Keyring, node: str, within: float = TIMEOUT
) -> Session:
    """Runs the receiver's side on an accepted nonblocking socket; returns the session.
    Raises PrefaceError (saying why) if the sender is not trusted, TimeoutError after
    `within` seconds. Reads nothing past the preface, and waits for the socket to be
    readable (never polls)."""
    return await asyncio.wait_for(_as_receiver(sock, keys, node), within)


async def _as_receiver(sock: socket.socket, keys: Keyring, node: str) -> Session:
    loop = asyncio.get_running_loop()
    magic = await _read(sock, len(MAGIC))
    if magic == HTTP2_START[: len(MAGIC)]:
        raise PlainHttp2(
            "HTTP/2 without the authenticated wire preface (a gRPC client without the wire key, "
            "or a node with auth.enabled false)"
        )
    if magic != MAGIC:
        raise PrefaceError("no authenticated wire preface (or one of another version)")
    hello = magic + await _read(sock, KEY_ID + NONCE + 2)
    mode = hello[-2]
    if mode not in (INTEGRITY, ENCRYPT):
        raise PrefaceError(f"an unknown record mode {mode}")
    name = await _read(sock, hello[-1])
    hello += name
    key = keys.by_id(hello[len(MAGIC) : len(MAGIC) + KEY_ID])
    if key is None:
        raise PrefaceError("a wire key this node does not hold")
    reply = MAGIC + secrets.token_bytes(NONCE) + _hello_name(node)
    transcript = hello + reply
    await loop.sock_sendall(sock, reply + _mac(key, b"receiver", transcript))
    if not hmac.compare_digest(await _read(sock, MAC), _mac(key, b"sender", transcript)):
        claimed = name.decode(errors="replace")
        raise PrefaceError(f"a wrong wire key MAC (claiming node {claimed!r})")
    await loop.sock_sendall(sock, ACCEPTED)
    return Session(name.decode(errors="replace"), key, transcript, mode == ENCRYPT)


@dataclass
class Refusals:
    """Refused connections: counted, and logged once per peer address per LOG_EVERY."""

    count: int = 0

    def __post_init__(self) -> None:
        self._logged: dict[str, float] = {}

    def refused(self, what: str, address: str, why: str) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self._logged.get(address, -LOG_EVERY) < LOG_EVERY:
            return
        if len(self._logged) > 4096:  # a scan from many addresses: keep memory bounded
            self._logged.clear()
        self._logged[address] = now
        log.warning("%s: refused a connection from %s: %s", what, address, why)
