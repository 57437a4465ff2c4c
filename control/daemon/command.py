"""`meshwire daemon --config FILE`: the node daemon.

Flags override the file and the environment (`MESHWIRE_*`): `--set KEY=VALUE`
for any key, and shorthands for the keys scripts set most. An invalid config
is reported naming the key, with exit status 2, before anything is touched.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

import uvloop

from meshwire.base.logs import setup_logging
from meshwire.control.auth.certs import CredentialError
from meshwire.control.common import heap
from meshwire.control.common.config import Config, ConfigError, load_config, parse_overrides
from meshwire.control.common.listening import ListenError

if TYPE_CHECKING:
    from meshwire.control.daemon.app import Daemon

log = logging.getLogger(__name__)

# Flag -> config key, for the keys deployments set most.
SHORTHANDS = {
    "node_name": "node_name",
    "node_ip": "node_ip",
    "api_url": "api.url",
    "kubeconfig": "api.kubeconfig",
    "cni_socket": "cni.socket",
    "metrics_listen": "metrics.listen",
    "inter_node_link_type": "inter_node_link_type",
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="meshwire daemon", description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="YAML config file (see `meshwire config defaults`)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key"
    )
    for flag, key in SHORTHANDS.items():
        parser.add_argument("--" + flag.replace("_", "-"), dest=flag, help=f"sets {key}")
    return parser.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> Config:
    overrides = parse_overrides(args.set)
    for flag, key in SHORTHANDS.items():
        value = getattr(args, flag)
        if value is not None:
            overrides[key] = value
    return load_config(args.config, os.environ, overrides)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"meshwire daemon: {exc}", file=sys.stderr)
        return 2
    # grpc's fork handlers crash a child forked while its threads run; the
    # daemon never forks with grpc live (workers are spawned).
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
    setup_logging(config.log.level, config.log.format, config.node_name)
    try:
        uvloop.run(_run(config))
    except ListenError as exc:
        print(f"meshwire daemon: {exc}", file=sys.stderr)
        return 1
    except (CredentialError, ConfigError) as exc:
        print(f"meshwire daemon: {exc}", file=sys.stderr)
        return 2
    return 0


async def _run(config: Config) -> None:
    from meshwire.control.daemon.app import Daemon

    daemon = Daemon(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, daemon.stop)
    settling = asyncio.create_task(_settle(daemon), name="settle")
    try:
        await daemon.run()
    finally:
        settling.cancel()


async def _settle(daemon: Daemon) -> None:
    """Freeze the process's heap once the first sync has built the tables
    (common/heap.py): a full collection then walks only what came after."""
    await daemon.links.wait_initialized()
    log.info("heap settled after the first sync: %d objects frozen", heap.settle())
