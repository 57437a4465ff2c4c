"""A whole `meshwire lab` on two simulated nodes, seen and handled as an operator would.

THREE_PODS places r1 and r3 on node1, r2 on node2 (round robin in file order):
link 1 (r1-r2) and link 3 (r2-r3) cross the nodes (vxlan, or grpc with
`inter_node_link_type: grpc`), link 2 (r1-r3) is a veth on node1. Every end has
an address, so every link is proven by a ping. `lab down` runs on exit, even
when the test failed.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from lab_helpers import Lab, unique_lab

from meshwire.tools.lab.lab_names import LabNames, node_ip
from meshwire.tools.lab.nsexec import argv_for
from meshwire.tools.lab.probe import http_get
from meshwire.tools.lab.runtime import meshwire_argv
from meshwire.tools.lab.state import LabDir, LabState

THREE_PODS = """\
apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata: {name: r1}
spec:
  links:
  - {uid: 1, peer_pod: r2, local_intf: eth1, peer_intf: eth1,
     local_ip: 10.71.1.1/24, peer_ip: 10.71.1.2/24}
  - {uid: 2, peer_pod: r3, local_intf: eth2, peer_intf: eth1,
     local_ip: 10.71.2.1/24, peer_ip: 10.71.2.3/24}
---
apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata: {name: r2}
spec:
  links:
  - {uid: 1, peer_pod: r1, local_intf: eth1, peer_intf: eth1,
     local_ip: 10.71.1.2/24, peer_ip: 10.71.1.1/24}
  - {uid: 3, peer_pod: r3, local_intf: eth2, peer_intf: eth2,
     local_ip: 10.71.3.2/24, peer_ip: 10.71.3.3/24}
---
apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata: {name: r3}
spec:
  links:
  - {uid: 2, peer_pod: r1, local_intf: eth1, peer_intf: eth2,
     local_ip: 10.71.2.3/24, peer_ip: 10.71.2.1/24}
  - {uid: 3, peer_pod: r2, local_intf: eth2, peer_intf: eth2,
     local_ip: 10.71.3.3/24, peer_ip: 10.71.3.2/24}
"""


@dataclass(frozen=True)
class End:
    pod: str
    intf: str
    address: str  # without the prefix length


@dataclass(frozen=True)
class Link:
    uid: int
    a: End
    b: End
    crosses_nodes: bool


LINKS = (
    Link(1, End("r1", "eth1", "10.71.1.1"), End("r2", "eth1", "10.71.1.2"), True),
    Link(2, End("r1", "eth2", "10.71.2.1"), End("r3", "eth1", "10.71.2.3"), False),
    Link(3, End("r2", "eth2", "10.71.3.2"), End("r3", "eth2", "10.71.3.3"), True),
)
METRICS_PORT = 51100
# Generous bounds on waits for a condition; never a timing check.
WAIT = 60.0
POLL = 0.1


@contextlib.contextmanager
def lab_up(tmp_path: Path, config: str) -> Iterator[Lab]:
    """THREE_PODS up on 2 nodes with the daemon config `config`; `lab down` on exit."""
    path = tmp_path / "daemon.yaml"
    path.write_text(config)
    with unique_lab(tmp_path, THREE_PODS) as lab:
        argv = ("up", str(lab.file), "--nodes", "2", "--config", str(path), "--wait", "60")
        assert lab.run(*argv) == 0
        yield lab


def delete_topologies(lab: Lab) -> None:
    """`meshwire delete -f` of the lab file, run from the hub as an operator would."""
    token = ("--token-file", str(LabDir(lab.directory).token_file))
    argv = meshwire_argv("delete", "-f", str(lab.file), "--server", state(lab).api_url, *token)
    done = subprocess.run(
        argv_for(LabNames(lab.name).hub_netns, argv),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"delete failed: {done.stdout} {done.stderr}"


def state(lab: Lab) -> LabState:
    return LabDir(lab.directory).load()


def pod_ns(lab: Lab, pod: str) -> str:
    return f"{lab.prefix}default.{pod}"


def ip(lab: Lab, pod: str, *argv: str) -> str:
    return subprocess.run(
        ["ip", "-n", pod_ns(lab, pod), *argv], capture_output=True, text=True, check=True
    ).stdout


def ifindex(lab: Lab, pod: str, intf: str) -> int | None:
    """The ifindex of `intf` in the pod; None if it is not there."""
    out = subprocess.run(
        ["ip", "-n", pod_ns(lab, pod), "-j", "link", "show", intf],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        return None
    index: int = json.loads(out.stdout)[0]["ifindex"]
    return index


def ifindexes(lab: Lab) -> dict[str, int | None]:
    """`pod:intf` -> ifindex of every link end."""
    return {
        f"{end.pod}:{end.intf}": ifindex(lab, end.pod, end.intf)
        for link in LINKS
        for end in (link.a, link.b)
    }


def addresses(lab: Lab, pod: str, intf: str) -> list[str]:
    out = json.loads(ip(lab, pod, "-j", "addr", "show", "dev", intf))
    return [
        f"{a['local']}/{a['prefixlen']}"
        for item in out
        for a in item.get("addr_info", [])
        if a.get("scope") == "global"
    ]


def pings(lab: Lab, link: Link) -> bool:
    """Whether a ping from the a-end to the b-end is answered within 3 s."""
    argv = ["ip", "netns", "exec", pod_ns(lab, link.a.pod)]
    argv += ["ping", "-c", "1", "-i", "0.2", "-w", "3", link.b.address]
    return subprocess.run(argv, capture_output=True, check=False, timeout=30).returncode == 0


def metric(lab: Lab, node: int, name: str) -> float:
    """A sample of node `node`'s daemon's /metrics (0 when the series is absent)."""
    answer = http_get(node_ip(node), METRICS_PORT, "/metrics", netns=f"{lab.prefix}node{node}")
    assert answer is not None and answer[0] == 200, f"node{node}'s /metrics: {answer}"
    match = re.search(rf"^{re.escape(name)} (\S+)$", answer[1], re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def samples(lab: Lab, node: int, prefix: str) -> dict[str, float]:
    """Every sample of node `node`'s /metrics whose `name{labels}` starts with `prefix`."""
    answer = http_get(node_ip(node), METRICS_PORT, "/metrics", netns=f"{lab.prefix}node{node}")
    assert answer is not None and answer[0] == 200, f"node{node}'s /metrics: {answer}"
    out = {}
    for line in answer[1].splitlines():
        name, _, value = line.rpartition(" ")
        if name.startswith(prefix):
            out[name] = float(value)
    return out


def wait_until(condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(POLL)
