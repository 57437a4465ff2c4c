"""`meshwire links`: a node's link ends and why any is down, from its daemon's `/links`.

Meant to run where the daemon runs; in the DaemonSet:
`kubectl -n meshwire exec ds/meshwire -- meshwire links --state error`
(the image has no curl). The daemon is found at `--url`, else at the config's
`metrics.listen` (`--config`, with the `MESHWIRE_*` environment as the daemon
reads it), else at the default port on loopback. A wildcard or empty host
means this host: loopback is asked. The token of the config's
`metrics.token_file`, if any, is presented: the daemon asks it of a client
off loopback.

Exit status: 0 with the table (or `--json`, the daemon's answer as is); 1
when the daemon cannot be reached or answers an error, naming the URL; 2 for
bad arguments or config.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from typing import Any

from meshwire.base import hostport
from meshwire.control.auth import token as tokens
from meshwire.control.common.config import ConfigError, MetricsConfig, load_config
from meshwire.control.tables.health import State
from meshwire.tools.client.text_table import table

TIMEOUT = 10.0
WILDCARDS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="meshwire links",
        description="Show this node's link ends, their state and last error (the daemon's /links).",
    )
    parser.add_argument("--url", help="the daemon's metrics address, e.g. http://10.0.0.5:51100")
    parser.add_argument("--config", help="the daemon's config file, to find metrics.listen")
    parser.add_argument("--state", choices=[s.value for s in State], help="only ends in STATE")
    parser.add_argument("--json", action="store_true", help="the daemon's answer as JSON")
    args = parser.parse_args(argv)
    try:
        base = args.url or daemon_url(args.config)
    except ConfigError as exc:
        print(f"meshwire links: {exc}", file=sys.stderr)
        return 2
    url = base.rstrip("/") + "/links" + (f"?state={args.state}" if args.state else "")
    try:
        with urllib.request.urlopen(daemon_request(url, args.config), timeout=TIMEOUT) as answer:
            body = answer.read().decode()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace").strip()
        print(f"meshwire links: {url}: {exc.code} {detail}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"meshwire links: cannot reach the daemon at {url}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(body)
    else:
        print(render(json.loads(body)))
    return 0


def daemon_request(url: str, config_path: str | None) -> urllib.request.Request:
    """A GET of `url` presenting the token of the config's `metrics.token_file`, if any;
    raises ConfigError, or OSError/ValueError for an unreadable token file."""
    request = urllib.request.Request(url)
    token_file = load_config(config_path).metrics.token_file if config_path else ""
    if token_file:
        request.add_header("Authorization", tokens.header(tokens.read(token_file)))
    return request


def daemon_url(config_path: str | None) -> str:
    """The URL of the daemon's metrics port, from its config if given; raises ConfigError."""
    listen = load_config(config_path).metrics.listen if config_path else MetricsConfig().listen
    host, port = hostport.split(listen)
    host = WILDCARDS.get(host, host)
    return f"http://{hostport.join(host, port)}"


def render(entries: list[dict[str, Any]]) -> str:
    """One line per link end: what it joins, its state and why it is not done."""
    rows = [
        (
            entry["link"],
            entry["kind"],
            f"{entry['local']['pod']}:{entry['local']['intf']}",
            _peer(entry["peer"]),
            _emulation(entry),
            entry["state"] + (" (permanent)" if entry["permanent"] else ""),
            entry["attempts"],
            entry["error"] or "-",
        )
        for entry in entries
    ]
    headers = ("link", "kind", "end", "peer", "emulation", "state", "failed", "last error")
    return table(f"link ends: {len(rows)}", headers, rows)


def _emulation(entry: dict[str, Any]) -> str:
    """Each end's impairments (`>` the frames this end sends, `<` the peer's) and a
    pulled cable; "-" for neither."""
    parts = []
    for arrow, end in (("> ", entry["local"]), ("< ", entry["peer"])):
        impairments = end.get("impairments") or {}
        if impairments:
            parts.append(arrow + " ".join(f"{k}={v:g}" for k, v in impairments.items()))
    if entry.get("cable") == "down":
        parts.append("cable down")
    if not parts and entry.get("emulated"):
        parts.append("emulated")  # a cable state set, up: the link stays on the workers
    return "; ".join(parts) or "-"


def _peer(peer: dict[str, Any]) -> str:
    end = f"{peer['pod']}:{peer['intf']}"
    return f"{end} on {peer['node_ip']}" if peer["node_ip"] else end
