"""Structured logs, the same for control and its dataplane workers.

One JSON object per line (or plain text for a terminal), on stderr. Workers
inherit control's stderr, so their lines arrive in the daemon's log; they use
the daemon's `log.level` and `log.format` and name themselves in every line
(`"worker": k` in JSON), so a collector can tell them apart from control.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Literal

LogFormat = Literal["json", "text"]

# Libraries whose debug output is per message or per event loop (pyroute2 logs
# every netlink message: 30 MB per daemon in a churn run): their lines below
# info are dropped when meshwire logs at debug.
QUIET_AT_DEBUG = ("pyroute2", "asyncio", "aiohttp", "grpc", "kubernetes", "urllib3")


class _QuietLibraries(logging.Filter):
    """A handler filter, not logger levels: pyroute2 resets its loggers' levels on import."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.INFO:
            return True
        return not any(
            record.name == name or record.name.startswith(name + ".") for name in QUIET_AT_DEBUG
        )


class JsonFormatter(logging.Formatter):
    def __init__(self, fields: dict[str, object] | None = None) -> None:
        super().__init__()
        # Written into every entry after the standard keys (e.g. the worker index).
        self._fields = dict(fields or {})

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **self._fields,
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def setup_logging(level: str, fmt: LogFormat, node: str, worker: int | None = None) -> None:
    """Sends every logger to stderr at `level`; `worker` labels a dataplane worker's lines."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter({} if worker is None else {"worker": worker}))
    else:
        who = node if worker is None else f"{node} worker {worker}"
        handler.setFormatter(
            logging.Formatter(f"%(asctime)s {who} %(levelname)s %(name)s: %(message)s")
        )
    handler.addFilter(_QuietLibraries())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
