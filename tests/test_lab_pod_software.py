"""Lab pods run real software: their own hostname, files and processes, `cmd`, `exec`,
`binds` and `env` from the lab file, `lab exec` and `lab logs`, and a lifecycle like a
runtime's (restart, kill-daemon, down). Real processes in real namespaces; the stand-in
runtime of lab_helpers replaces only the API, the daemons and the CNI shim."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_helpers import Lab, StubRuntime, lab_exec, pid_alive, unique_lab

from meshwire.tools.lab import holder, processes
from meshwire.tools.lab.lab_names import netns_path

pytestmark = pytest.mark.root

LAB_FILE = """\
name: sw
topology:
  defaults:
    env: {COLOR: blue}
  nodes:
    r1:
      kind: linux
      cmd: sh -c 'echo started as $(hostname) $COLOR; exec sleep 100000'
      exec:
        - sh -c 'echo one >> /tmp/order'
        - sh -c 'echo two >> /tmp/order'
      binds:
        - conf/r1.conf:/run/conf/r1.conf:ro
        - conf:/tmp/conf
    r2:
      kind: linux
      binds:
        - conf/r2.conf:/run/conf/r2.conf
  links:
    - endpoints: ["r1:eth1", "r2:eth1"]
"""
# Generous: the machine is shared, and a pod's processes start in milliseconds when idle.
DEADLINE = 60.0


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    with up_lab(tmp_path, LAB_FILE) as lab:
        yield lab


def up_lab(tmp_path: Path, text: str, rc: int = 0) -> Any:
    conf = tmp_path / "conf"
    conf.mkdir(exist_ok=True)
    (conf / "r1.conf").write_text("hostname r1-from-its-file\n")
    (conf / "r2.conf").write_text("hostname r2-from-its-file\n")
    (tmp_path / "lab.clab.yml").write_text(text)

    class Up:
        def __enter__(self) -> Lab:
            self.context = unique_lab(tmp_path, text)
            lab = self.context.__enter__()
            # The lab file next to its binds (they are relative to it).
            lab.file = tmp_path / "lab.clab.yml"
            got = lab.run("up", str(lab.file), "--no-daemon", runtime=stub(tmp_path))
            assert got == rc
            return lab

        def __exit__(self, *exc: object) -> None:
            self.context.__exit__(None, None, None)

    return Up()


def stub(tmp_path: Path) -> StubRuntime:
    return StubRuntime(tmp_path, with_daemons=False)


def lab_exec_cli(
    lab: Lab, *argv: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`meshwire lab exec` as a user runs it, in a process of its own."""
    cli = [sys.executable, "-m", "meshwire.tools.cli", "lab", "exec"]
    cli += ["--name", lab.name, "--dir", str(lab.directory), *argv]
    return subprocess.run(
        cli,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        check=False,
    )


def state(lab: Lab) -> dict[str, Any]:
    saved: dict[str, Any] = json.loads((lab.directory / "state.json").read_text())
    return saved


def pids(lab: Lab, role: str) -> list[int]:
    return [p["pid"] for p in state(lab)["processes"] if p["role"] == role]


def wait_for(what: str, check: Any) -> None:
    deadline = time.monotonic() + DEADLINE
    while not check():
        assert time.monotonic() < deadline, f"not after {DEADLINE:.0f}s: {what}"
        time.sleep(0.1)


def test_each_pod_has_its_own_hostname(lab: Lab) -> None:
    assert lab_exec(lab, "r1", "--", "hostname").stdout == "r1\n"
    assert lab_exec(lab, "r2", "hostname").stdout == "r2\n"


def test_each_pod_reads_its_own_bound_files_read_only_when_asked(lab: Lab) -> None:
    assert lab_exec(lab, "r1", "cat", "/run/conf/r1.conf").stdout == "hostname r1-from-its-file\n"
    assert lab_exec(lab, "r2", "cat", "/run/conf/r2.conf").stdout == "hostname r2-from-its-file\n"
    assert lab_exec(lab, "r2", "test", "-e", "/run/conf/r1.conf").returncode == 1
    denied = lab_exec(lab, "r1", "sh", "-c", "echo x > /run/conf/r1.conf")
    assert denied.returncode != 0 and "Read-only" in denied.stderr
    assert lab_exec(lab, "r1", "ls", "/tmp/conf").stdout.split() == ["r1.conf", "r2.conf"]


@pytest.mark.parametrize("directory", ["/tmp", "/var/tmp", "/run"])
def test_scratch_directories_are_private_to_the_pod(lab: Lab, directory: str) -> None:
    mark = f"{directory}/mwpods-mark-{lab.name}"
    assert lab_exec(lab, "r1", "sh", "-c", f"echo mine > {mark}").returncode == 0
    assert not Path(mark).exists()
    assert lab_exec(lab, "r2", "test", "-e", mark).returncode == 1
    assert lab_exec(lab, "r1", "cat", mark).stdout == "mine\n"


def test_exec_commands_ran_in_order_once_and_cmd_sees_env(lab: Lab) -> None:
    assert lab_exec(lab, "r1", "cat", "/tmp/order").stdout == "one\ntwo\n"
    assert lab_exec(lab, "r1", "sh", "-c", "echo $COLOR").stdout == "blue\n"
    log = lab.directory / "logs" / "cmd-sw-r1.log"
    wait_for("cmd wrote its first line", lambda: log.exists() and log.read_text())
    assert log.read_text() == "started as r1 blue\n"


def test_the_pod_sees_only_its_own_processes_and_interfaces(lab: Lab) -> None:
    ps = lab_exec(lab, "r1", "ps", "-e", "-o", "pid=,args=").stdout.splitlines()
    commands = [line.split(None, 1)[1] for line in ps]
    assert any("sleep 100000" in c for c in commands)
    assert ps[0].split()[0] == "1"  # the holder is the pod's init
    links = lab_exec(lab, "r1", "ls", "/sys/class/net").stdout.split()
    assert "lo" in links and not any(n.startswith("mwl") for n in links)


def test_lab_exec_passes_the_exit_status_and_stdin(lab: Lab) -> None:
    assert lab_exec(lab, "r1", "--", "sh", "-c", "exit 7").returncode == 7
    assert lab_exec(lab, "r1", "no-such-command").returncode == 127
    echoed = lab_exec_cli(lab, "-i", "r1", "--", "tr", "a-z", "A-Z", stdin="hello\n")
    assert echoed.stdout == "HELLO\n"
    assert lab_exec(lab, "r1", "cat").stdout == ""  # without -i: no stdin


def test_lab_exec_t_gives_a_terminal(lab: Lab) -> None:
    plain = lab_exec(lab, "r1", "sh", "-c", "test -t 1 && echo tty || echo no-tty")
    assert plain.stdout == "no-tty\n"
    tty = lab_exec_cli(lab, "-t", "r1", "sh", "-c", "test -t 0 && test -t 1 && echo tty; exit 3")
    assert tty.stdout.replace("\r", "") == "tty\n"
    assert tty.returncode == 3


def test_lab_logs_prints_the_cmd_output(lab: Lab, capfd: pytest.CaptureFixture[str]) -> None:
    log = lab.directory / "logs" / "cmd-sw-r1.log"
    wait_for("cmd wrote its first line", lambda: log.exists() and log.read_text())
    capfd.readouterr()
    assert lab.run("logs", "r1") == 0
    assert capfd.readouterr().out == "started as r1 blue\n"
    assert lab.run("logs", "r2") == 1  # r2 has no cmd


def test_status_shows_each_pods_processes(lab: Lab, capfd: pytest.CaptureFixture[str]) -> None:
    capfd.readouterr()
    assert lab.run("status", "--json") == 0
    pods = {p["pod"]: p["processes"] for p in json.loads(capfd.readouterr().out)["pods"]}
    assert pods == {"sw/r1": {"pod": "running", "cmd": "running"}, "sw/r2": {"pod": "running"}}
    os.kill(pids(lab, "cmd/sw/r1")[0], 9)
    wait_for("cmd gone", lambda: not pid_alive(pids(lab, "cmd/sw/r1")[0]))
    assert lab.run("status") == 0
    assert "sw/r1" in capfd.readouterr().out.split("pod running, cmd exited")[0]


def test_restart_pod_stops_its_processes_and_starts_cmd_and_exec_again(
    lab: Lab, tmp_path: Path
) -> None:
    old_holder, old_cmd = pids(lab, "pod/sw/r1") + pids(lab, "cmd/sw/r1")
    inside = lab_exec(
        lab, "r1", "sh", "-c", "sleep 100000 > /dev/null 2>&1 & echo $!"
    ).stdout.strip()
    assert inside
    other = pids(lab, "pod/sw/r2")

    assert lab.run("restart-pod", "r1", "--wait", "0", runtime=stub(tmp_path)) == 0

    assert not pid_alive(old_holder) and not pid_alive(old_cmd)
    new_holder, new_cmd = pids(lab, "pod/sw/r1") + pids(lab, "cmd/sw/r1")
    assert pid_alive(new_holder) and pid_alive(new_cmd)
    assert lab_exec(lab, "r1", "cat", "/tmp/order").stdout == "one\ntwo\n"  # a new /tmp
    assert lab_exec(lab, "r1", "pgrep", "-f", "sleep 100000").stdout.split() != [inside]
    assert pids(lab, "pod/sw/r2") == other and pid_alive(other[0])


def test_down_leaves_no_process_of_the_lab(tmp_path: Path) -> None:
    with up_lab(tmp_path, LAB_FILE) as lab:
        started = [p["pid"] for p in state(lab)["processes"]]
        inside = lab_exec(lab, "r1", "sh", "-c", "setsid sleep 100000 > /dev/null 2>&1 & echo $!")
        assert inside.returncode == 0
        namespace = os.readlink(f"/proc/{pids(lab, 'pod/sw/r1')[0]}/ns/pid_for_children")
        assert lab.run("down") == 0
    assert not any(pid_alive(pid) for pid in started)
    left = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") == namespace:
                    left.append(entry)
            except OSError:
                continue
    assert left == []


def test_down_stops_a_pod_holder_no_record_names(tmp_path: Path) -> None:
    """As when a command died between starting a pod's holder and recording it."""
    with up_lab(tmp_path, LAB_FILE) as lab:
        (netns,) = [p["netns"] for p in state(lab)["pods"].values() if p["name"] == "r1"]
        stray = holder.start_holder("stray", Path(netns_path(netns)), "r1", [], tmp_path / "log")
        try:
            assert stray.pid not in pids(lab, "stray") and pid_alive(stray.pid)
            assert holder.stray_holders(netns_path(lab.prefix)).count(stray.pid) == 1
            assert lab.run("down") == 0
            assert not pid_alive(stray.pid)
        finally:
            processes.stop(stray)


def test_a_failing_exec_stops_up_with_its_output(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    text = LAB_FILE.replace("sh -c 'echo two >> /tmp/order'", "sh -c 'echo broken >&2; exit 4'")
    with up_lab(tmp_path, text, rc=1) as lab:
        err = capfd.readouterr().err
        assert "pod sw/r1: exec 2 of 2 `sh -c 'echo broken >&2; exit 4'`" in err
        assert "exit status 4: broken" in err
        assert lab_exec(lab, "r1", "cat", "/tmp/order").stdout == "one\n"


def test_a_missing_bind_target_outside_tmp_and_run_is_named(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    text = LAB_FILE.replace("conf:/tmp/conf", "conf:/no/such/dir/mwpods")
    with up_lab(tmp_path, text, rc=1):
        err = capfd.readouterr().err
        assert "/no/such/dir/mwpods does not exist in the pod" in err


def test_kill_daemon_touches_no_pod_process(tmp_path: Path) -> None:
    with unique_lab(tmp_path, LAB_FILE) as lab:
        (tmp_path / "conf").mkdir()
        (tmp_path / "conf" / "r1.conf").write_text("")
        (tmp_path / "conf" / "r2.conf").write_text("")
        lab.file = tmp_path / "lab.clab.yml"
        lab.file.write_text(LAB_FILE)
        assert lab.run("up", str(lab.file), "--wait", "0", runtime=StubRuntime(tmp_path)) == 0
        pod_processes = pids(lab, "pod/sw/r1") + pids(lab, "cmd/sw/r1") + pids(lab, "pod/sw/r2")
        daemons = pids(lab, "daemon/node1")

        assert lab.run("kill-daemon", "node1", runtime=StubRuntime(tmp_path)) == 0

        assert pids(lab, "daemon/node1")[-1] != daemons[-1]
        assert pids(lab, "pod/sw/r1") + pids(lab, "cmd/sw/r1") + pids(lab, "pod/sw/r2") == (
            pod_processes
        )
        assert all(pid_alive(pid) for pid in pod_processes)


def test_move_pod_starts_cmd_and_exec_again_on_the_new_node(lab: Lab, tmp_path: Path) -> None:
    old = pids(lab, "pod/sw/r1") + pids(lab, "cmd/sw/r1")
    node = state(lab)["pods"]["sw/r1"]["node"]
    other = next(n for n in state(lab)["nodes"] if n != node)

    assert lab.run("move-pod", "r1", other, "--wait", "0", runtime=stub(tmp_path)) == 0

    assert state(lab)["pods"]["sw/r1"]["node"] == other
    assert not any(pid_alive(pid) for pid in old)
    assert all(pid_alive(pid) for pid in pids(lab, "pod/sw/r1") + pids(lab, "cmd/sw/r1"))
    assert lab_exec(lab, "r1", "cat", "/tmp/order").stdout == "one\ntwo\n"


KNE_FILE = """\
name: kl
nodes:
  - name: k1
    config:
      command: [/bin/sh, -c]
      args: ["cat /run/kne/startup.cfg; echo $GREETING; exec sleep 100000"]
      env: {GREETING: hello}
      config_path: /run/kne
      config_file: startup.cfg
      data: "hostname k1-config\\n"
  - name: k2
links:
  - {a_node: k1, a_int: eth1, z_node: k2, z_int: eth1}
"""


def test_kne_command_env_and_config_data_run_in_the_pod(tmp_path: Path) -> None:
    with unique_lab(tmp_path, KNE_FILE) as lab:
        assert lab.run("up", str(lab.file), "--no-daemon", runtime=stub(tmp_path)) == 0
        assert lab_exec(lab, "k1", "cat", "/run/kne/startup.cfg").stdout == "hostname k1-config\n"
        log = lab.directory / "logs" / "cmd-kl-k1.log"
        wait_for("cmd printed its config", lambda: log.exists() and "hello" in log.read_text())
        assert log.read_text() == "hostname k1-config\nhello\n"


def test_lab_logs_f_follows_the_cmd_until_it_ends(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    text = LAB_FILE.replace(
        "cmd: sh -c 'echo started as $(hostname) $COLOR; exec sleep 100000'",
        "cmd: sh -c 'echo first; until [ -e /tmp/go ]; do sleep 0.1; done; echo second'",
    )
    with up_lab(tmp_path, text) as lab:
        capfd.readouterr()
        followed: list[int] = []
        follower = threading.Thread(target=lambda: followed.append(lab.run("logs", "r1", "-f")))
        follower.start()
        printed: list[str] = []

        def first_line_printed() -> bool:
            printed.append(capfd.readouterr().out)
            return "".join(printed) == "first\n"

        # `logs -f` printed the first line: it is following when the second is written.
        wait_for("logs -f printed the first line", first_line_printed)
        assert lab_exec_cli(lab, "r1", "touch", "/tmp/go").returncode == 0
        follower.join(DEADLINE)
        assert followed == [0]
        assert "".join(printed) + capfd.readouterr().out == "first\nsecond\n"
