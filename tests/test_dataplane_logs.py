"""Logs: JSON lines or text, and dataplane workers logging as the daemon does.

A daemon started with `log.format: json` must not have its workers write plain
text into the same stream (they inherit control's stderr), and `log.level:
debug` must reach them too.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator

import pytest

from meshwire.base.logs import JsonFormatter, setup_logging
from meshwire.dataplane.handle import WorkerHandle
from meshwire.dataplane.worker import WorkerConfig


@pytest.fixture
def restored_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def record(msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("meshwire.x", logging.WARNING, __file__, 1, msg, args, None)


def test_a_json_line_has_the_standard_keys_then_the_fixed_fields() -> None:
    line = JsonFormatter({"worker": 2}).format(record("wire %d: %s", 7, "gone"))
    entry = json.loads(line)
    assert list(entry) == ["ts", "level", "logger", "msg", "worker"]
    assert entry["level"] == "warning"
    assert entry["logger"] == "meshwire.x"
    assert entry["msg"] == "wire 7: gone"
    assert entry["worker"] == 2
    assert entry["ts"].endswith("Z")


def test_an_exception_is_one_json_line_with_its_traceback() -> None:
    try:
        raise ValueError("bad frame")
    except ValueError:
        rec = logging.LogRecord("m", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    line = JsonFormatter().format(rec)
    assert "\n" not in line
    assert "ValueError: bad frame" in json.loads(line)["exc"]


def test_text_lines_name_the_node_and_the_worker(
    restored_root_logger: None, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging("info", "text", "node1", worker=3)
    logging.getLogger("meshwire.t").info("hello")
    logging.getLogger("meshwire.t").debug("not at info")
    err = capsys.readouterr().err
    assert " node1 worker 3 INFO meshwire.t: hello" in err
    assert "not at info" not in err


async def started_worker_log(capfd: pytest.CaptureFixture[str], **config: object) -> list[str]:
    handle = await WorkerHandle.start(WorkerConfig(listen_host="127.0.0.1", **config))  # type: ignore[arg-type]
    assert await handle.stop() == 0
    return capfd.readouterr().err.splitlines()


async def test_a_worker_writes_json_lines_naming_itself_at_the_daemons_level(
    capfd: pytest.CaptureFixture[str],
) -> None:
    lines = await started_worker_log(
        capfd, log_level="debug", log_format="json", node="node1", index=3
    )
    entries = [json.loads(line) for line in lines]
    assert entries, "the worker logged nothing at debug"
    assert all(entry["worker"] == 3 for entry in entries)
    serving = [e for e in entries if e["msg"].startswith("serving the Wire service on 127.0.0.1:")]
    assert [(e["level"], e["logger"]) for e in serving] == [("debug", "meshwire.dataplane.worker")]


async def test_a_worker_at_info_does_not_log_debug(capfd: pytest.CaptureFixture[str]) -> None:
    lines = await started_worker_log(capfd, log_level="info", log_format="json", index=0)
    assert not [line for line in lines if "serving the Wire service" in line]


def test_at_debug_libraries_that_log_every_message_stay_at_info(
    restored_root_logger: None, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging("debug", "text", "node1")
    # What importing pyroute2 does to its loggers after the daemon set up logging.
    logging.getLogger("pyroute2").setLevel(logging.NOTSET)
    quiet = logging.getLogger("pyroute2.netlink.core")
    logging.getLogger("meshwire.x").debug("ours")
    logging.getLogger("pyroute2x").debug("not one of them")
    quiet.debug("a netlink message")
    quiet.info("pyroute2 says something that matters")
    err = capsys.readouterr().err
    assert "ours" in err
    assert "not one of them" in err
    assert "a netlink message" not in err
    assert "something that matters" in err
