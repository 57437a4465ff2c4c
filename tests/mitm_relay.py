"""A man in the middle of a wire stream, run as its own process: `python mitm_relay.py
TARGET_PORT MODE INJECT_HEX STATUS_FILE` listens on a free port of 127.0.0.1 (inside
the test's netns), prints it, and relays to TARGET_PORT.

It relays every connection to the target worker. On the first connection only, once
AFTER units of the sender's stream went through, it attacks the sender-to-receiver
direction once and writes the mode to STATUS_FILE:

- sealed streams (after the authenticated preface, relayed intact), unit = record:
  `flip` flips one byte of a record, `replay` sends a record a second time, `inject`
  puts a record of its own (an HTTP/2 DATA frame carrying INJECT_HEX as a Batch, and
  a made-up tag) between two records;
- `inject-plain`: a stream without preface, unit = HTTP/2 frame: a DATA frame
  carrying INJECT_HEX as a Batch on the call's stream, after its first DATA frame.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import sys
import threading

AFTER = 6
# The sender's preface: MAGIC 8, key id 8, nonce 32, mode 1, name length 1, name, MAC 32.
HELLO_FIXED = 50
MAC = 32
HTTP2_START = 24


def read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def batch_message(frame: bytes, wire_id: int) -> bytes:
    """A gRPC message holding Batch{frames: [wire_id][len][frame]}."""
    batch = struct.pack("!IH", wire_id, len(frame)) + frame
    body = b"\x0a" + varint(len(batch)) + batch
    return b"\x00" + struct.pack("!I", len(body)) + body


def varint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def data_frame(payload: bytes, stream_id: int) -> bytes:
    return (
        struct.pack("!I", len(payload))[1:] + b"\x00\x00" + struct.pack("!I", stream_id) + payload
    )


class Relay:
    def __init__(self, target: int, mode: str, inject: bytes, status: str) -> None:
        self.target, self.mode, self.inject, self.status = target, mode, inject, status
        self.connections = 0

    def serve(self, listener: socket.socket) -> None:
        while True:
            client, _ = listener.accept()
            self.connections += 1
            attack = self.connections == 1
            server = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self.back, args=(server, client), daemon=True).start()
            threading.Thread(target=self.forth, args=(client, server, attack), daemon=True).start()

    def back(self, server: socket.socket, client: socket.socket) -> None:
        self.pump(server, client)

    def forth(self, client: socket.socket, server: socket.socket, attack: bool) -> None:
        try:
            if attack and self.mode == "inject-plain":
                self.plain(client, server)
            elif attack:
                self.sealed(client, server)
        except (EOFError, OSError):
            self.close(client, server)
            return
        self.pump(client, server)

    def sealed(self, client: socket.socket, server: socket.socket) -> None:
        hello = read_exactly(client, HELLO_FIXED)
        server.sendall(hello + read_exactly(client, hello[-1]))
        server.sendall(read_exactly(client, MAC))  # once the receiver's hello came back
        for _ in range(AFTER):
            head = read_exactly(client, 4)
            server.sendall(head + read_exactly(client, struct.unpack("!I", head)[0]))
        head = read_exactly(client, 4)
        record = bytearray(head + read_exactly(client, struct.unpack("!I", head)[0]))
        if self.mode == "flip":
            record[len(record) // 2] ^= 0x01
            server.sendall(bytes(record))
        elif self.mode == "replay":
            server.sendall(bytes(record) + bytes(record))
        else:
            forged = data_frame(batch_message(self.inject, 2), 1) + bytes(16)
            server.sendall(struct.pack("!I", len(forged)) + forged + bytes(record))
        self.done()

    def plain(self, client: socket.socket, server: socket.socket) -> None:
        server.sendall(read_exactly(client, HTTP2_START))
        while True:
            head = read_exactly(client, 9)
            length = struct.unpack("!I", b"\x00" + head[:3])[0]
            server.sendall(head + read_exactly(client, length))
            if head[3] == 0 and struct.unpack("!I", head[5:])[0] & 0x7FFFFFFF == 1:
                server.sendall(data_frame(batch_message(self.inject, 2), 1))
                self.done()
                return

    def done(self) -> None:
        with open(self.status, "w") as f:
            f.write(self.mode)

    def pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        self.close(source, sink)

    @staticmethod
    def close(*socks: socket.socket) -> None:
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def main() -> None:
    target, mode, inject, status = sys.argv[1:5]
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    print(listener.getsockname()[1], flush=True)
    Relay(int(target), mode, bytes.fromhex(inject), status).serve(listener)


if __name__ == "__main__":
    main()
