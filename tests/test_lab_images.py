"""Lab pods that run an image through containerd: the image's entrypoint and cmd as a
container in the pod's namespaces (hostname, the CNI's netns), `exec` and `lab exec` inside
it, its output in `lab logs`, a restart in a new netns, and nothing left after `down`.

The image is made here in a second (tests/busybox_image.py); no pod here pulls anything.
With no containerd running on the machine the lab starts its own, under its directory."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from lab_helpers import Lab, StubRuntime, host_netns_names, lab_exec, pid_alive, unique_lab

from tests.busybox_image import busybox_root, write_image

pytestmark = pytest.mark.root

IMAGE = "meshwire.test/labbox:1"
ENTRY = '#!/bin/sh\necho "entry: $*"\nexec "$@"\n'
LAB_FILE = """\
name: img
topology:
  defaults:
    env: {COLOR: green}
  nodes:
    r1:
      kind: linux
      image: images/box.tar
      exec: ["ip addr add 10.0.9.1/24 dev eth1"]
      binds: ["conf:/conf:ro"]
    r2:
      kind: linux
      image: images/box.tar.gz
      cmd: sh -c 'echo cmd as $(hostname); exec sleep 100000'
      exec: ["ip addr add 10.0.9.2/24 dev eth1"]
  links:
    - endpoints: ["r1:eth1", "r2:eth1"]
"""
# A loaded machine takes seconds for what takes milliseconds idle.
DEADLINE = 60.0


def make_image(directory: Path) -> Path:
    """busybox with an entrypoint that says how it was started, then runs its arguments."""
    root = busybox_root(directory / "root")
    (root / "bin" / "entry").write_text(ENTRY)
    (root / "bin" / "entry").chmod(0o755)
    cmd = ["sh", "-c", "echo started as $(hostname) $COLOR; exec sleep 100000"]
    return write_image(root, directory / "box.tar", IMAGE, cmd, entrypoint=["/bin/entry"])


def state_of(lab: Lab) -> dict[str, Any]:
    saved: dict[str, Any] = json.loads((lab.directory / "state.json").read_text())
    return saved


def wait_for(what: str, check: Any) -> None:
    deadline = time.monotonic() + DEADLINE
    while not check():
        assert time.monotonic() < deadline, f"not after {DEADLINE:.0f}s: {what}"
        time.sleep(0.2)


def log_of(lab: Lab, pod: str) -> str:
    log = lab.directory / "logs" / f"cmd-img-{pod}.log"
    return log.read_text() if log.exists() else ""


def statuses(lab: Lab, capfd: pytest.CaptureFixture[str]) -> dict[str, dict[str, str]]:
    capfd.readouterr()
    assert lab.run("status", "--json") == 0
    return {p["pod"]: p["processes"] for p in json.loads(capfd.readouterr().out)["pods"]}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """The two-pod lab with its real daemons on two nodes (r1-r2 crosses them)."""
    tmp = tmp_path_factory.mktemp("images")
    archive = make_image(tmp / "images")
    # The same image gzipped, as `docker save | gzip` leaves it.
    with open(archive, "rb") as plain, gzip.open(archive.with_suffix(".tar.gz"), "wb") as packed:
        shutil.copyfileobj(plain, packed)
    (tmp / "conf").mkdir()
    (tmp / "conf" / "r1.conf").write_text("from the lab file\n")
    with unique_lab(tmp, LAB_FILE) as made:
        made.file = tmp / "lab.clab.yml"
        made.file.write_text(LAB_FILE)
        started = time.monotonic()
        assert made.run("up", str(made.file), "--nodes", "2") == 0
        print(f"two image pods up in {time.monotonic() - started:.1f}s")
        yield made


def test_each_image_pod_runs_its_entrypoint_and_cmd_under_its_own_hostname(lab: Lab) -> None:
    assert lab_exec(lab, "r1", "hostname").stdout == "r1\n"
    assert lab_exec(lab, "r2", "--", "hostname").stdout == "r2\n"
    wait_for("both containers wrote", lambda: "started" in log_of(lab, "r1") and
             "cmd as" in log_of(lab, "r2"))  # fmt: skip
    # The image's Entrypoint and Cmd; the lab file's cmd replaces the Cmd alone.
    assert log_of(lab, "r1").startswith("entry: sh -c echo started as $(hostname) $COLOR")
    assert "started as r1 green\n" in log_of(lab, "r1")
    assert "entry: sh -c echo cmd as $(hostname); exec sleep 100000\ncmd as r2\n" in log_of(
        lab, "r2"
    )


def test_an_image_pod_has_the_images_files_and_its_binds(lab: Lab) -> None:
    assert lab_exec(lab, "r1", "cat", "/etc/passwd").stdout == "root:x:0:0:root:/root:/bin/sh\n"
    assert lab_exec(lab, "r1", "cat", "/conf/r1.conf").stdout == "from the lab file\n"
    denied = lab_exec(lab, "r1", "sh", "-c", "echo x > /conf/r1.conf")
    assert denied.returncode != 0 and "Read-only" in denied.stderr
    assert lab_exec(lab, "r2", "test", "-e", "/conf").returncode == 1
    assert lab_exec(lab, "r1", "sh", "-c", "echo $COLOR $HOSTNAME").stdout == "green r1\n"


def test_a_ping_crosses_the_link_between_the_image_pods(lab: Lab) -> None:
    netns = state_of(lab)["pods"]["img/r1"]["netns"]
    container = state_of(lab)["containers"]["img/r1"]
    # The container's network is the pod's netns, the one its links were wired into.
    assert (
        os.stat(f"/proc/{container['pid']}/ns/net").st_ino == os.stat(f"/run/netns/{netns}").st_ino
    )
    wait_for("r1 pings r2", lambda: lab_exec(lab, "r1", "ping", "-c", "1", "-W", "2",
                                             "10.0.9.2").returncode == 0)  # fmt: skip


def test_lab_exec_in_an_image_pod_passes_status_stdin_and_a_terminal(lab: Lab) -> None:
    assert lab_exec(lab, "r1", "--", "sh", "-c", "exit 7").returncode == 7
    missing = lab_exec(lab, "r1", "no-such-command")
    assert missing.returncode == 127 and "no-such-command" in missing.stderr
    assert lab_exec(lab, "r1", "cat").stdout == ""  # without -i: no stdin
    cli = [sys.executable, "-m", "meshwire.tools.cli", "lab", "exec"]
    cli += ["--name", lab.name, "--dir", str(lab.directory)]
    echoed = subprocess.run([*cli, "-i", "r1", "--", "tr", "a-z", "A-Z"], input="hello\n",
                            capture_output=True, text=True, timeout=DEADLINE)  # fmt: skip
    assert echoed.stdout == "HELLO\n"
    tty = subprocess.run([*cli, "-t", "r1", "sh", "-c", "test -t 0 && test -t 1 && echo tty; "
                          "exit 3"], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                         timeout=DEADLINE)  # fmt: skip
    assert tty.stdout.replace("\r", "") == "tty\n" and tty.returncode == 3


def test_lab_logs_prints_the_containers_output(lab: Lab, capfd: pytest.CaptureFixture[str]) -> None:
    wait_for("r2 wrote", lambda: "cmd as r2" in log_of(lab, "r2"))
    capfd.readouterr()
    assert lab.run("logs", "r2") == 0
    assert capfd.readouterr().out.endswith("cmd as r2\n")


def test_status_shows_the_container_running_then_exited(
    lab: Lab, capfd: pytest.CaptureFixture[str]
) -> None:
    assert statuses(lab, capfd)["img/r2"] == {"pod": "running", "container": "running"}
    pid = state_of(lab)["containers"]["img/r2"]["pid"]
    os.kill(pid, 9)
    wait_for("r2's task gone", lambda: not pid_alive(pid))
    assert statuses(lab, capfd)["img/r2"] == {"pod": "running", "container": "exited"}


def test_restart_pod_starts_the_container_again_in_the_new_netns(lab: Lab) -> None:
    before = state_of(lab)["containers"]["img/r2"]
    old_netns = os.stat(f"/proc/{state_of(lab)['containers']['img/r1']['pid']}/ns/net").st_ino
    assert lab.run("restart-pod", "r2") == 0
    after = state_of(lab)["containers"]["img/r2"]
    assert after["pid"] != before["pid"] and not pid_alive(before["shim_pid"])
    netns = state_of(lab)["pods"]["img/r2"]["netns"]
    assert os.stat(f"/proc/{after['pid']}/ns/net").st_ino == os.stat(f"/run/netns/{netns}").st_ino
    assert (
        old_netns == os.stat(f"/proc/{state_of(lab)['containers']['img/r1']['pid']}/ns/net").st_ino
    )
    assert lab_exec(lab, "r2", "hostname").stdout == "r2\n"
    # Its exec ran again (the address is on the new eth1), and the link carries pings.
    assert "10.0.9.2/24" in lab_exec(lab, "r2", "ip", "addr", "show", "eth1").stdout
    wait_for("r2 pings r1", lambda: lab_exec(lab, "r2", "ping", "-c", "1", "-W", "2",
                                             "10.0.9.1").returncode == 0)  # fmt: skip
    wait_for("the new container wrote", lambda: log_of(lab, "r2").count("cmd as r2") == 2)


def test_kill_daemon_touches_no_container(lab: Lab) -> None:
    before = {k: c["pid"] for k, c in state_of(lab)["containers"].items()}
    assert lab.run("kill-daemon", "node1") == 0
    assert {k: c["pid"] for k, c in state_of(lab)["containers"].items()} == before
    assert all(pid_alive(pid) for pid in before.values())


def test_down_leaves_no_container_image_namespace_or_process(lab: Lab) -> None:
    saved = state_of(lab)
    record = saved["containerd"]
    assert record["own"], "this machine runs no containerd: the lab starts its own"
    pids = [p["pid"] for p in saved["processes"]]
    pids += [c[k] for c in saved["containers"].values() for k in ("pid", "shim_pid")]
    cgroups = [f"{record['namespace']}-{c['id']}" for c in saved["containers"].values()]
    assert lab.run("down") == 0
    assert not [pid for pid in pids if pid_alive(pid)]
    assert not lab.directory.exists()
    assert host_netns_names(lab.prefix) == []
    assert not [g for g in cgroups if list(Path("/sys/fs/cgroup").glob(f"*/{g}"))]
    # The shims' socket folders the lab's containerd made (other labs' may still be in use).
    assert not [d for d in record["host_dirs"] if Path(d).exists() and not any(Path(d).iterdir())]


def test_up_without_containerd_names_it_and_makes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "images").mkdir()
    for name in ("box.tar", "box.tar.gz"):
        (tmp_path / "images" / name).write_bytes(b"")
    (tmp_path / "conf").mkdir()
    with unique_lab(tmp_path, LAB_FILE) as lab:
        lab.file = tmp_path / "lab.clab.yml"
        lab.file.write_text(LAB_FILE)
        hidden = tmp_path / "bin"
        hidden.mkdir()
        with monkeypatch.context() as env:
            env.setenv("PATH", str(hidden))
            env.setenv("CONTAINERD_ADDRESS", str(tmp_path / "no-containerd.sock"))
            capfd.readouterr()
            stub = StubRuntime(tmp_path, with_daemons=False)
            assert lab.run("up", str(lab.file), "--no-daemon", runtime=stub) == 1
        said = capfd.readouterr().err
        assert "need containerd" in said and "containerd-shim-runc-v2" in said, said
        assert not lab.directory.exists() and host_netns_names(lab.prefix) == []


def test_an_image_already_in_containerd_runs_by_reference_and_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A containerd the user runs: the image is taken from its `default` namespace, and
    `down` leaves that namespace's image as it was."""
    archive = make_image(tmp_path / "images")
    with user_containerd(tmp_path / "cd") as ctr:
        ctr("images", "import", str(archive))
        monkeypatch.setenv("CONTAINERD_ADDRESS", str(tmp_path / "cd" / "sock"))
        text = "name: ref\ntopology:\n  nodes:\n    r1: {image: " + IMAGE + "}\n    r2: {}\n"
        text += "  links:\n    - endpoints: ['r1:eth1', 'r2:eth1']\n"
        with unique_lab(tmp_path, text) as lab:
            lab.file = tmp_path / "ref.clab.yml"
            lab.file.write_text(text)
            stub = StubRuntime(tmp_path, with_daemons=False)
            assert lab.run("up", str(lab.file), "--no-daemon", runtime=stub) == 0
            assert not state_of(lab)["containerd"]["own"]
            assert lab_exec(lab, "r1", "hostname").stdout == "r1\n"
            assert lab_exec(lab, "r1", "cat", "/bin/entry").stdout == ENTRY
            namespace = state_of(lab)["containerd"]["namespace"]
            assert lab.run("down") == 0
        assert namespace not in ctr("namespaces", "ls", "-q").split()
        assert ctr("-n", "default", "images", "ls", "-q").split() == [IMAGE]


@contextmanager
def user_containerd(directory: Path) -> Iterator[Any]:
    """A containerd as a user would run one (its socket in `directory`), stopped after;
    yields its `ctr`."""
    directory.mkdir(parents=True)
    sock = directory / "sock"
    (directory / "config.toml").write_text(
        f'version = 2\nroot = "{directory / "root"}"\nstate = "{directory / "state"}"\n'
        'disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.internal.v1.opt"]\n'
        f'[grpc]\n  address = "{sock}"\n[ttrpc]\n  address = "{sock}.ttrpc"\n'
    )

    def ctr(*args: str, check: bool = True) -> str:
        done = subprocess.run(
            ["ctr", "-a", str(sock), *args], capture_output=True, text=True, timeout=DEADLINE
        )
        assert done.returncode == 0 or not check, done.stderr
        return done.stdout if done.returncode == 0 else ""

    # Its shims' socket folders, which containerd 1.6 puts there whatever its config says.
    made = [d for d in (Path("/run/containerd"), Path("/run/containerd/s")) if not d.exists()]
    with open(directory / "log", "wb") as log:
        proc = subprocess.Popen(
            ["containerd", "--config", str(directory / "config.toml")],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        try:
            wait_for("containerd answers", lambda: ctr("version", check=False) != "")
            yield ctr
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            for folder in reversed(made):
                with contextlib.suppress(OSError):  # not empty: another containerd's now
                    folder.rmdir()
