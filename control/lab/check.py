"""`meshwire lab check`: prove every link of the lab carries traffic.

Per link: both ends must exist and be up in their pods' namespaces; then a
link with an address on both ends must answer ping (sent from the `a` end
through the nsexec launcher), and a link without must pass a raw Ethernet
frame in each direction (`frames.py`). A host link (macvlan to `localhost`)
is only checked for its pod end. Links are checked in parallel; each result
names the link and, when it fails, why.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from meshwire.control.lab import kernel
from meshwire.control.lab.frames import frame_passes
from meshwire.control.lab.links import LabEnd, LabLink
from meshwire.control.lab.names import LabNames
from meshwire.control.lab.nsexec import argv_for

PING_COUNT = 3
PING_TIMEOUT = 10.0
FRAME_TIMEOUT = 3.0
PARALLEL = 16


@dataclass(frozen=True, slots=True)
class LinkResult:
    link: LabLink
    ok: bool
    method: str  # ping | frame | exists
    reason: str = ""

    def line(self) -> str:
        verdict = "ok  " if self.ok else "FAIL"
        why = f": {self.reason}" if self.reason else ""
        link = self.link
        return f"{verdict} {link.namespace}/{link.uid} {link.kind} {self.method} {link.name}{why}"


def end_netns(names: LabNames, end: LabEnd) -> str:
    namespace, _, pod = end.pod.partition("/")
    return names.pod_netns(namespace, pod)


def _end_problem(names: LabNames, end: LabEnd) -> str | None:
    ns = end_netns(names, end)
    state = kernel.end_state(ns, end.intf)
    if not state.exists:
        return f"{end.pod}: interface {end.intf} missing (netns {ns})"
    if not state.admin_up:
        return f"{end.pod}: interface {end.intf} is down"
    if not state.up:
        return f"{end.pod}: interface {end.intf} has no carrier"
    return None


def check_link(names: LabNames, link: LabLink) -> LinkResult:
    ends = (link.a,) if link.b.pod == "localhost" else (link.a, link.b)
    problems = [p for p in (_end_problem(names, end) for end in ends) if p]
    if problems:
        return LinkResult(link, False, "exists", "; ".join(problems))
    if len(ends) == 1:
        return LinkResult(link, True, "exists", "host end not checked")
    if link.a.address and link.b.address:
        return _ping(names, link)
    return _frames(names, link)


def _ping(names: LabNames, link: LabLink) -> LinkResult:
    command = ["ping", "-c", str(PING_COUNT), "-i", "0.2", "-W", "2", "-I", link.a.intf]
    argv = argv_for(end_netns(names, link.a), [*command, link.b.address])
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PING_TIMEOUT)
    except subprocess.TimeoutExpired:
        return LinkResult(link, False, "ping", f"ping {link.b.address} timed out")
    if done.returncode == 0:
        return LinkResult(link, True, "ping")
    detail = (done.stderr.strip() or "no reply").splitlines()[-1]
    return LinkResult(link, False, "ping", f"{link.b.address} from {link.a.pod}: {detail}")


def _frames(names: LabNames, link: LabLink) -> LinkResult:
    a_ns, b_ns = end_netns(names, link.a), end_netns(names, link.b)
    for src, src_ns, dst, dst_ns in ((link.a, a_ns, link.b, b_ns), (link.b, b_ns, link.a, a_ns)):
        direction = f"{src.pod}:{src.intf} -> {dst.pod}:{dst.intf}"
        try:
            passed = frame_passes(src_ns, src.intf, dst_ns, dst.intf, FRAME_TIMEOUT)
        except OSError as exc:
            return LinkResult(link, False, "frame", f"{direction}: {exc.strerror or exc}")
        if not passed:
            return LinkResult(link, False, "frame", f"{direction}: frame not received")
    return LinkResult(link, True, "frame")


def check_all(names: LabNames, links: list[LabLink]) -> list[LinkResult]:
    """One result per link, in the order given."""
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        return list(pool.map(lambda link: check_link(names, link), links))
