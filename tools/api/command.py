"""`meshwire api serve --db FILE --listen HOST:PORT [--token-file F] [--debug-knobs]`.

With `--token-file`, every request must present the token in F as a bearer
token (server.py); an unreadable or empty file exits 2.

Serves until SIGTERM or SIGINT, then ends every watch and closes the database
cleanly; exits 0. Prints the URL it serves on (one line, flushed) once it
accepts connections, so a script can wait for that line. Port 0 picks a free
port. Exits 2 for a malformed `--listen`.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from meshwire.base import hostport
from meshwire.control.auth import token as tokens
from meshwire.tools.api.server import DEFAULT_COMPACTION_INTERVAL, ApiServer


def _listen(value: str) -> tuple[str, int]:
    try:
        host, port = hostport.split(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--listen: {exc}") from None
    return host or "127.0.0.1", port


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="meshwire api serve",
        description="Serve the embedded Kubernetes-style API for Topology objects.",
    )
    parser.add_argument("--db", required=True, help="SQLite file (created if missing)")
    parser.add_argument(
        "--listen",
        type=_listen,
        default=("127.0.0.1", 6443),
        help="HOST:PORT (default %(default)s)",
    )
    parser.add_argument(
        "--token-file",
        help="a file holding the bearer token every request must present (mode 0600)",
    )
    parser.add_argument(
        "--debug-knobs",
        action="store_true",
        help="serve POST /debug/knobs (drop/hang watches, compact, delay) and "
        "GET /debug/requests (requests by client, verb, resource) for tests",
    )
    parser.add_argument(
        "--bookmark-interval", type=float, default=1.0, help="seconds between watch bookmarks"
    )
    parser.add_argument(
        "--compaction-interval",
        type=float,
        default=DEFAULT_COMPACTION_INTERVAL,
        help="compact watch history older than this many seconds; 0 keeps it all",
    )
    return parser


async def _serve(args: argparse.Namespace, token: str) -> None:
    host, port = args.listen
    server = ApiServer(
        args.db,
        host,
        port,
        knobs_enabled=args.debug_knobs,
        bookmark_interval=args.bookmark_interval,
        compaction_interval=args.compaction_interval,
        token=token,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    try:
        print(server.url, flush=True)
        await stop.wait()
    finally:
        await server.stop()


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        token = tokens.read(args.token_file) if args.token_file else ""
    except (OSError, ValueError) as e:
        print(f"meshwire api serve: --token-file: {e}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(args, token))
    except OSError as e:
        print(
            f"meshwire api serve: cannot listen on {args.listen[0]}:{args.listen[1]}: {e}",
            file=sys.stderr,
        )
        return 1
    return 0
