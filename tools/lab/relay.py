"""A TCP relay across namespaces: how the user's own commands on the host reach the lab's API.

    python -m meshwire.tools.lab.relay --listen H:P [--listen-netns NS] --to H:P [--to-netns NS]

The lab's API runs inside the hub namespace; `lab up` starts this relay in the
host namespace on 127.0.0.1:<free port> with `--to-netns` the hub, so
`meshwire apply --server http://127.0.0.1:<port>` works from the host while
nothing is added to the host's namespace but a loopback listener. A socket is
made by a thread that entered its namespace and stays there whatever thread
uses it. Bytes pass unchanged both ways (long-lived watch streams included);
either side closing closes the pair. Exit status 1 naming the address when it
cannot listen.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import sys

from meshwire.base import hostport
from meshwire.tools.lab.netns import socket_in

CHUNK = 65536
MODULE = "meshwire.tools.lab.relay"


def listen_socket(address: tuple[str, int], netns: str | None) -> socket.socket:
    sock = socket_in(netns, socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


async def serve(listener: socket.socket, target: tuple[str, int], netns: str | None) -> None:
    loop = asyncio.get_running_loop()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = socket_in(netns, socket.AF_INET, socket.SOCK_STREAM)
        upstream.setblocking(False)
        try:
            await loop.sock_connect(upstream, target)
            up_reader, up_writer = await asyncio.open_connection(sock=upstream)
        except OSError:
            upstream.close()
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(handle, sock=listener)
    async with server:
        await server.serve_forever()


def argv_for(listen: str, to: str, to_netns: str) -> list[str]:
    """The argv of a relay listening on `listen` here and connecting to `to` inside `to_netns`."""
    return [sys.executable, "-m", MODULE, "--listen", listen, "--to", to, "--to-netns", to_netns]


def argv_into(listen: str, listen_netns: str, to: str) -> list[str]:
    """The argv of a relay listening on `listen` inside `listen_netns` and connecting to
    `to` from here."""
    return [sys.executable, "-m", MODULE, "--listen", listen, "--listen-netns", listen_netns,
            "--to", to]  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=MODULE)
    parser.add_argument("--listen", required=True, help="HOST:PORT to listen on")
    parser.add_argument("--listen-netns", help="namespace to listen in (default: this one)")
    parser.add_argument("--to", required=True, help="HOST:PORT to connect to")
    parser.add_argument("--to-netns", help="namespace to connect from (default: this one)")
    args = parser.parse_args(argv)
    try:
        listener = listen_socket(hostport.split(args.listen), args.listen_netns)
    except OSError as exc:
        print(f"relay: cannot listen on {args.listen}: {exc.strerror}", file=sys.stderr)
        return 1
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(listener, hostport.split(args.to), args.to_netns))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
