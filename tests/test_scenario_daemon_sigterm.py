"""A daemon stopped by SIGTERM (a DaemonSet rollout) leaves every link as it is.

Kubernetes stops the daemon's pod with SIGTERM. The daemon stops taking work,
lets a link operation in flight finish, and tears nothing down: links are
kernel objects in the pods and outlive it. Kernel links (veth, vxlan) go on
carrying traffic while it is away, and so do gRPC wires: their frames are moved
by the node's dataplane workers, which outlive the daemon (the lab sets
`dataplane.run_dir`) and are adopted by the next one. When the daemon starts
again, nothing is rebuilt: every link end has the ifindex it had.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from outage_helpers import LINKS, addresses, ifindexes, lab_up, pings, state, wait_until

from meshwire.tools.lab import processes, up
from meshwire.tools.lab.runtime import MeshwireRuntime
from meshwire.tools.lab.state import LabDir

pytestmark = pytest.mark.root

NODE = "node1"
PR_SET_CHILD_SUBREAPER = 36
# Bound on the daemon's clean exit after SIGTERM: never a timing check.
EXIT_LIMIT = 60.0


@contextlib.contextmanager
def subreaper() -> Iterator[None]:
    """This process adopts its orphaned descendants meanwhile: `lab up` forks the daemons
    from its fork server, which exits, so they become children of this process."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0, ctypes.get_errno()
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def sigterm_and_wait(pid: int) -> int:
    """SIGTERM the daemon (adopted by this process, `subreaper`) and reap it; its exit
    status."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + EXIT_LIMIT
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        assert time.monotonic() < deadline, f"the daemon did not exit within {EXIT_LIMIT}s"
        time.sleep(0.05)


@pytest.mark.parametrize("kind", ["vxlan", "grpc"])
def test_a_daemon_stopped_by_sigterm_leaves_every_link_and_rebuilds_none_on_restart(
    tmp_path: Path, kind: str
) -> None:
    with subreaper(), lab_up(tmp_path, f"inter_node_link_type: {kind}\n") as lab:
        for link in LINKS:
            wait_until(lambda link=link: pings(lab, link), f"link {link.uid} carrying a ping")
        before = ifindexes(lab)
        daemon = state(lab).process(f"daemon/{NODE}")
        assert daemon is not None

        assert sigterm_and_wait(daemon.pid) == 0
        assert processes.start_time(daemon.pid) is None
        assert "links stay up" in Path(daemon.log).read_text()

        # While the daemon is away: every end is there as it was, addresses included.
        assert ifindexes(lab) == before
        for link in LINKS:
            for end in (link.a, link.b):
                assert addresses(lab, end.pod, end.intf) == [f"{end.address}/24"], end
        for link in LINKS:
            assert pings(lab, link), f"link {link.uid} carried nothing while the daemon was away"

        lab_state = state(lab)
        up.start_daemon(LabDir(lab.directory), lab_state, MeshwireRuntime(), NODE)
        up.wait_ready(lab_state, NODE)

        for link in LINKS:
            wait_until(lambda link=link: pings(lab, link), f"link {link.uid} carrying a ping")
        assert ifindexes(lab) == before
