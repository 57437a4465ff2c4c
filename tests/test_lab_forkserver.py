"""`lab up`'s fork server: a child runs the `python -m` command it was given, inside its
namespace, in its own session and log, forked from the preloaded modules."""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshwire.tools.lab import netns, processes
from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.forkserver import ForkServer
from meshwire.tools.lab.lab_names import netns_path
from meshwire.tools.lab.state import ProcessRecord

pytestmark = pytest.mark.root

REPORT = [sys.executable, "-m", "tests.forkserver_children.report"]
PRELOAD = "xml.dom.minidom"


@pytest.fixture
def name() -> Iterator[str]:
    made = f"mwtfs{secrets.token_hex(3)}"
    netns.create(made)
    try:
        yield made
    finally:
        netns.delete(made)


@pytest.fixture
def started() -> Iterator[list[ProcessRecord]]:
    records: list[ProcessRecord] = []
    try:
        yield records
    finally:
        for record in records:
            processes.stop(record)


def ended(record: ProcessRecord) -> str:
    """The log of the record's process, once it has exited."""
    deadline = time.monotonic() + 30
    while processes.is_running(record):
        assert time.monotonic() < deadline, f"{record.role} still runs"
        time.sleep(0.02)
    return Path(record.log).read_text()


def report(record: ProcessRecord) -> dict[str, object]:
    value: dict[str, object] = json.loads(ended(record).splitlines()[-1])
    return value


def test_a_python_command_is_forked_into_its_netns_session_and_log(
    name: str, started: list[ProcessRecord], tmp_path: Path
) -> None:
    with ForkServer([PRELOAD]) as server:
        record = server.start("child", name, [*REPORT, "0", "a b"], tmp_path / "child.log")
        started.append(record)
        seen = report(record)
    assert seen["pid"] == record.pid and seen["sid"] == record.pid
    assert seen["netns"] == os.stat(netns_path(name)).st_ino
    assert seen["argv"] == ["0", "a b"] and seen["name"] == "__main__"
    assert seen["preloaded"] is True
    assert seen["stdin"] == ""  # not the server's requests
    # The record reads as one `nsexec` started.
    assert record.argv[-len(REPORT) - 2 :] == [*REPORT, "0", "a b"]
    assert name in record.argv and record.start_time > 0


def test_several_children_and_any_other_command_is_execd(
    name: str, started: list[ProcessRecord], tmp_path: Path
) -> None:
    script = "readlink /proc/self/ns/net; echo $$"
    with ForkServer([PRELOAD]) as server:
        first = server.start("one", name, REPORT, tmp_path / "one.log")
        shell = server.start("sh", name, ["sh", "-c", script], tmp_path / "sh.log")
        started += [first, shell]
        assert report(first)["preloaded"] is True
        inode, pid = ended(shell).split()
    assert inode == f"net:[{os.stat(netns_path(name)).st_ino}]"
    assert int(pid) == shell.pid


def test_a_server_with_a_thread_execs_instead_of_forking(
    name: str, started: list[ProcessRecord], tmp_path: Path
) -> None:
    with ForkServer([PRELOAD, "tests.forkserver_children.threaded"]) as server:
        record = server.start("child", name, REPORT, tmp_path / "child.log")
        started.append(record)
        seen = report(record)
    assert seen["preloaded"] is False and seen["pid"] == record.pid
    assert seen["netns"] == os.stat(netns_path(name)).st_ino


def test_a_missing_netns_is_named_in_the_childs_log(
    started: list[ProcessRecord], tmp_path: Path
) -> None:
    with ForkServer([]) as server:
        record = server.start("child", "mwtfs-missing", REPORT, tmp_path / "child.log")
        started.append(record)
        log = ended(record)
    assert "forkserver: netns mwtfs-missing:" in log and "does not exist" in log


def test_a_module_that_cannot_import_is_in_the_childs_log_and_the_server_goes_on(
    name: str, started: list[ProcessRecord], tmp_path: Path
) -> None:
    with ForkServer(["mwtfs_no_such_module"]) as server:
        bad = server.start("bad", name, [sys.executable, "-m", "mwtfs_no_such_module"],
                           tmp_path / "bad.log")  # fmt: skip
        good = server.start("good", name, REPORT, tmp_path / "good.log")
        started += [bad, good]
        assert "No module named mwtfs_no_such_module" in ended(bad)
        assert report(good)["netns"] == os.stat(netns_path(name)).st_ino


def test_a_bad_request_is_refused_by_name(tmp_path: Path) -> None:
    with ForkServer([]) as server, pytest.raises(LabError, match="argv: a non-empty list"):
        server.start("child", "x", [], tmp_path / "child.log")


def test_the_server_ends_with_its_input_and_its_children_run_on(
    name: str, started: list[ProcessRecord], tmp_path: Path
) -> None:
    server = ForkServer([])
    record = server.start("sleeper", name, ["sleep", "30"], tmp_path / "sleeper.log")
    started.append(record)
    assert server.close() == 0
    assert processes.is_running(record)
