"""Informer benchmark: initial sync and event throughput on a big lab.

    .venv/bin/python bench/informer_bench.py [--nodes 1500] [--pods 10000]
        [--links 20000] [--updates 5000] [--seed 1] [--kube]

On a machine whose loopback has no 127.0.0.1, run it in a private network
namespace: `unshare -n sh -c 'ip link set lo up; .venv/bin/python bench/...'`.

Three processes, so each number belongs to one party:
- a writer child generates the lab (pods spread over the nodes, each link
  between two random pods with both ends consistent, every pod's `status.src_ip`
  one of the node IPs) and writes it into a fresh SQLite file directly through
  the embedded API's `Store`, with no server running: loading is not what is
  measured. Each object takes two commits, as over HTTP: a create (which drops
  the status, as for a CRD with the status subresource) and a status update;
- a server child runs the embedded `ApiServer` on that file and makes the
  status updates on command, straight through its store, so they reach the
  watch exactly as updates over HTTP would;
- this process runs only the informer into a `Table[Topology]`, so its peak
  RSS (`getrusage`) is the informer's and the table's, plus the imports.

Measured: initial sync (list in pages of 500, parse, apply; until `synced`),
peak RSS, live throughput (updates made while the informer watches; this is
bounded by the server's one-commit-per-update writes too), and backlog
throughput (updates made while the watch is silent, then delivered at once
when it reopens from its last resourceVersion: the informer's own rate).

With `--kube` the server is a real kube-apiserver and etcd instead
(`tests/kube_cluster.py`, binaries from scripts/kube-assets.sh; deploy/crd.yaml
installed): the writer child creates each object and writes its status over
HTTPS (8 requests at a time), and the server child makes the status updates
the same way and relays the informer's connection, holding what the server
sends while told to hang (the server's watch stays open; its events wait in
the relay, then arrive at once).

A server child that dies ends the run with exit status 1 and its exit code,
rather than leaving the informer to retry forever.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import random
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from meshwire.control.informer.informer import Informer
    from meshwire.control.model.topology import Topology
    from meshwire.control.tables.table import Table

NAMESPACE = "bench"

T = TypeVar("T")


def node_ip(node: int) -> str:
    return f"10.1.{node // 250}.{node % 250 + 1}"


def generate(nodes: int, pods: int, links: int, seed: int) -> list[dict[str, Any]]:
    """`pods` Topology objects with `links` links, each end naming the other.

    Link k joins pod k mod `pods` (so every pod gets about 2*links/pods ends)
    to a random other pod; interface names count up per pod.
    """
    rng = random.Random(seed)
    names = [f"p{i:05d}" for i in range(pods)]
    ends: list[list[dict[str, Any]]] = [[] for _ in range(pods)]
    for k in range(links):
        a = k % pods
        b = rng.randrange(pods - 1)
        b += b >= a
        a_intf, b_intf = f"eth{len(ends[a]) + 1}", f"eth{len(ends[b]) + 1}"
        ends[a].append(
            {"uid": k + 1, "peer_pod": names[b], "local_intf": a_intf, "peer_intf": b_intf}
        )
        ends[b].append(
            {"uid": k + 1, "peer_pod": names[a], "local_intf": b_intf, "peer_intf": a_intf}
        )
    return [
        {
            "apiVersion": "networkop.co.uk/v1beta1",
            "kind": "Topology",
            "metadata": {"name": names[i], "namespace": NAMESPACE},
            "spec": {"links": ends[i]},
            "status": {
                "src_ip": node_ip(i % nodes),
                "net_ns": f"/var/run/netns/cni-{i:08x}",
                "container_id": f"{i:064x}",
            },
        }
        for i in range(pods)
    ]


def write_lab(db: str, nodes: int, pods: int, links: int, seed: int) -> None:
    from meshwire.tools.api.store import Store

    store = Store(db)
    for obj in generate(nodes, pods, links, seed):
        created = store.create(obj)
        store.update({**created, "status": obj["status"]}, status=True)
    store.close()


def serve(db: str, conn: Connection) -> None:
    """The server child: answers ("port",), ("hang", bool), ("update", n, round), ("stop",)."""
    from meshwire.tools.api.server import ApiServer

    async def main() -> None:
        server = ApiServer(db, "127.0.0.1", 0, bookmark_interval=1.0)
        await server.start()
        loop = asyncio.get_running_loop()
        try:
            while True:
                command = await loop.run_in_executor(None, conn.recv)
                if command[0] == "stop":
                    break
                if command[0] == "port":
                    conn.send(server.port)
                elif command[0] == "hang":
                    server.hang_watches(command[1])
                    conn.send(None)
                elif command[0] == "update":
                    conn.send(await _updates(server, command[1], command[2]))
        finally:
            await server.stop()

    asyncio.run(main())


async def _updates(server: Any, count: int, round_: int) -> float:
    """`count` status updates (plumbing_error set per round); returns seconds spent."""
    started = time.perf_counter()
    for i in range(count):
        obj = server.store.get(NAMESPACE, f"p{i:05d}")
        obj["status"]["plumbing_error"] = f"round {round_}"
        server.store.update(obj, status=True)
        if i % 200 == 199:
            await asyncio.sleep(0)
    return time.perf_counter() - started


KUBE_THREADS = 8


def _kube_objects(kubeconfig: str) -> Any:
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    configuration.connection_pool_maxsize = KUBE_THREADS
    return client.CustomObjectsApi(client.ApiClient(configuration))


def write_lab_kube(kubeconfig: str, nodes: int, pods: int, links: int, seed: int) -> None:
    """The writer child on a real API server: a create and a status write per object."""
    from concurrent.futures import ThreadPoolExecutor

    objects = _kube_objects(kubeconfig)
    target = ("networkop.co.uk", "v1beta1", NAMESPACE, "topologies")

    def one(obj: dict[str, Any]) -> None:
        status = obj.pop("status")
        objects.create_namespaced_custom_object(*target, obj)
        objects.patch_namespaced_custom_object_status(
            *target, obj["metadata"]["name"], {"status": status}
        )

    with ThreadPoolExecutor(KUBE_THREADS) as pool:
        list(pool.map(one, generate(nodes, pods, links, seed)))


def serve_kube(kubeconfig: str, host: str, port: int, conn: Connection) -> None:
    """The server child on a real API server: relays host:<its port> to host:`port`, and
    answers ("port",), ("hang", bool), ("update", n, round), ("stop",) as `serve` does."""
    from concurrent.futures import ThreadPoolExecutor

    objects = _kube_objects(kubeconfig)
    target = ("networkop.co.uk", "v1beta1", NAMESPACE, "topologies")

    async def main() -> None:
        flowing = asyncio.Event()
        flowing.set()

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, hold: bool) -> None:
            try:
                while data := await src.read(65536):
                    if hold:
                        await flowing.wait()
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            up_reader, up_writer = await asyncio.open_connection(host, port)
            await asyncio.gather(pipe(reader, up_writer, False), pipe(up_reader, writer, True))

        relay = await asyncio.start_server(handle, host, 0)
        loop = asyncio.get_running_loop()

        def updates(count: int, round_: int) -> float:
            started = time.perf_counter()

            def one(i: int) -> None:
                objects.patch_namespaced_custom_object_status(
                    *target, f"p{i:05d}", {"status": {"plumbing_error": f"round {round_}"}}
                )

            with ThreadPoolExecutor(KUBE_THREADS) as pool:
                list(pool.map(one, range(count)))
            return time.perf_counter() - started

        while True:
            command = await loop.run_in_executor(None, conn.recv)
            if command[0] == "stop":
                break
            if command[0] == "port":
                conn.send(relay.sockets[0].getsockname()[1])
            elif command[0] == "hang":
                (flowing.clear if command[1] else flowing.set)()
                conn.send(None)
            elif command[0] == "update":
                conn.send(await loop.run_in_executor(None, updates, command[1], command[2]))
        relay.close()

    asyncio.run(main())


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def measure(
    url: str, conn: Connection, updates: int, kubeconfig: str = ""
) -> list[tuple[str, str]]:
    from meshwire.control.informer.client import make_api_client
    from meshwire.control.informer.informer import Informer
    from meshwire.control.informer.sink import TableSink
    from meshwire.control.tables.table import Table

    rows: list[tuple[str, str]] = [("peak RSS before the informer", f"{rss_mib():.0f} MiB")]
    table: Table[Topology] = Table("topologies")
    api = await make_api_client(url, kubeconfig)
    informer = Informer(api, TableSink(table))
    started = time.perf_counter()
    task = asyncio.create_task(informer.run())
    try:
        return rows + await _rounds(informer, table, conn, updates, started)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()  # type: ignore[no-untyped-call]


async def _rounds(
    informer: Informer, table: Table[Topology], conn: Connection, updates: int, started: float
) -> list[tuple[str, str]]:
    """The measurements once the informer runs: sync, live round, backlog round."""
    await informer.synced.wait()
    sync = time.perf_counter() - started
    links = sum(len(t.links) for t in table.values())
    placed = sum(1 for t in table.values() if t.status.src_ip)
    rows = [
        (
            "initial sync",
            f"{sync:.2f} s ({len(table)} topologies, {links} link ends, "
            f"{placed} with status.src_ip)",
        ),
        ("peak RSS after the sync", f"{rss_mib():.0f} MiB"),
    ]

    async def delivered(round_: int) -> float:
        last = f"{NAMESPACE}/p{updates - 1:05d}"
        while (t := table.get(last)) is None or t.status.plumbing_error != f"round {round_}":
            await table.wait_revision_above(table.revision)
        return time.perf_counter()

    loop = asyncio.get_running_loop()
    started = time.perf_counter()
    waiter = asyncio.create_task(delivered(1))
    writes = await loop.run_in_executor(None, _ask, conn, ("update", updates, 1))
    live = await waiter - started
    rows.append(
        (
            "live updates",
            f"{updates / live:,.0f} events/s ({updates} in {live:.2f} s; "
            f"server writes alone {writes:.2f} s)",
        )
    )

    await loop.run_in_executor(None, _ask, conn, ("hang", True))
    await loop.run_in_executor(None, _ask, conn, ("update", updates, 2))
    waiter = asyncio.create_task(delivered(2))
    started = time.perf_counter()
    await loop.run_in_executor(None, _ask, conn, ("hang", False))
    backlog = await waiter - started
    rows.append(
        (
            "backlog after reconnect",
            f"{updates / backlog:,.0f} events/s ({updates} in {backlog:.2f} s)",
        )
    )
    rows += [
        ("peak RSS at the end", f"{rss_mib():.0f} MiB"),
        (
            "informer counters",
            f"lists={informer.stats.lists} relists={informer.stats.relists} "
            f"reconnects={informer.stats.reconnects} changes={informer.stats.changes} "
            f"MODIFIED={informer.stats.events['MODIFIED']}",
        ),
    ]
    return rows


class ServerDied(Exception):
    """The server child exited while the benchmark still needed it."""


async def _unless_exited(work: Coroutine[Any, Any, T], sentinel: int) -> T:
    """`work`'s result; `ServerDied` as soon as the process behind `sentinel` exits.

    The informer retries a dead server forever, so without this a crashed
    server child would leave the benchmark waiting for `synced` or an update.
    """
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()

    def on_exit() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(sentinel, on_exit)
    task = asyncio.create_task(work)
    either: list[asyncio.Future[Any]] = [task, exited]
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        loop.remove_reader(sentinel)
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise ServerDied
    return task.result()


def _ask(conn: Connection, command: tuple[Any, ...]) -> Any:
    conn.send(command)
    return conn.recv()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1500)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--links", type=int, default=20000)
    parser.add_argument("--updates", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--uvloop", action="store_true", help="run the informer on uvloop")
    parser.add_argument(
        "--kube",
        action="store_true",
        help="a real kube-apiserver + etcd instead of the embedded API",
    )
    args = parser.parse_args(argv)
    if args.updates > args.pods:
        parser.error("--updates: at most --pods (one update per pod per round)")
    if args.kube:
        return main_kube(args)
    spawn = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="mwbench") as tmp:
        db = str(Path(tmp) / "api.sqlite")
        load = _write_lab(write_lab, db, args.nodes, args.pods, args.links, args.seed)
        if load is None:
            return 1
        ours, theirs = spawn.Pipe()
        server = spawn.Process(target=serve, args=(db, theirs))
        server.start()
        # Only the child holds its end now, so a read from a dead child raises EOFError.
        theirs.close()
        try:
            port = _ask(ours, ("port",))
            run = asyncio.run
            if args.uvloop:
                import uvloop

                run = uvloop.run
            work = measure(f"http://127.0.0.1:{port}", ours, args.updates)
            rows = run(_unless_exited(work, server.sentinel))
        except (ServerDied, EOFError, BrokenPipeError):
            return _server_died(server)
        finally:
            _stop_server(server, ours)
    lab = f"{args.nodes} nodes, {args.pods} pods, {args.links} links"
    rows.insert(0, ("lab", f"{lab}; written through the Store in {load:.1f} s"))
    rows.insert(1, ("event loop", "uvloop" if args.uvloop else "asyncio"))
    show(rows)
    return 0


def _write_lab(target: Callable[..., None], *args: Any) -> float | None:
    """Seconds `target(*args)` took to write the lab in a spawned child; None (said on
    stderr) when the child failed."""
    started = time.perf_counter()
    writer = multiprocessing.get_context("spawn").Process(target=target, args=args)
    writer.start()
    writer.join()
    if writer.exitcode != 0:
        print(f"informer_bench: writing the lab failed (exit {writer.exitcode})", file=sys.stderr)
        return None
    return time.perf_counter() - started


def _server_died(server: BaseProcess) -> int:
    """Say that the server child died; the exit status of the benchmark."""
    server.join(30)
    print(
        f"informer_bench: the server child died (exit {server.exitcode}); "
        "its traceback, if any, is above",
        file=sys.stderr,
    )
    return 1


def _stop_server(server: BaseProcess, ours: Connection) -> None:
    """Ask the server child to stop; terminate it if it is still there after 30 s."""
    if server.is_alive():
        ours.send(("stop",))
        server.join(30)
    if server.is_alive():
        server.terminate()
        server.join()


def show(rows: list[tuple[str, str]]) -> None:
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


def main_kube(args: argparse.Namespace) -> int:
    """The same measurements against a private kube-apiserver + etcd."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.kube_cluster import ControlPlane, assets
    from tests.kube_helpers import admin, create_namespace, install_crd
    from tests.paths import REPO

    spawn = multiprocessing.get_context("spawn")
    plane = ControlPlane(assets())
    plane.start()
    try:
        api = admin(plane)
        install_crd(api, REPO / "deploy" / "crd.yaml")
        create_namespace(api, NAMESPACE)
        api.close()
        kubeconfig = str(plane.admin_kubeconfig)
        load = _write_lab(write_lab_kube, kubeconfig, args.nodes, args.pods, args.links, args.seed)
        if load is None:
            return 1
        ours, theirs = spawn.Pipe()
        server = spawn.Process(target=serve_kube, args=(kubeconfig, plane.host, plane.port, theirs))
        server.start()
        theirs.close()
        try:
            port = _ask(ours, ("port",))
            relayed = plane.admin_kubeconfig_for(
                plane.dir / "relayed.kubeconfig", f"https://{plane.host}:{port}"
            )
            work = measure("", ours, args.updates, str(relayed))
            rows = asyncio.run(_unless_exited(work, server.sentinel))
        except (ServerDied, EOFError, BrokenPipeError):
            return _server_died(server)
        finally:
            _stop_server(server, ours)
    finally:
        plane.stop()
    lab = f"{args.nodes} nodes, {args.pods} pods, {args.links} links"
    rows.insert(0, ("lab", f"{lab}; written over HTTPS in {load:.1f} s"))
    rows.insert(1, ("server", "kube-apiserver v1.20.2 + etcd 3.4 (watch cache on)"))
    show(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
