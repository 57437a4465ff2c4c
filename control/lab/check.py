"""`meshwire lab check`: prove every link of the lab carries traffic.

Per link: both ends must exist and be up in their pods' namespaces (read with
one link dump per namespace); then a link with an address on both ends must
answer an ICMP echo sent from the `a` end (`icmp.py`), and a link without must
pass a raw Ethernet frame in each direction (`frames.py`). A host link
(macvlan on the node's `eth0`) must pass a raw frame each way between the pod
and the node's underlay: sent by the pod, it is seen leaving the node on the
hub bridge port; sent from that port, the pod receives it. A link whose peer
pod has no Topology is skipped with the reason (no CNI plugin wires it).

Links are checked in parallel; each result names the link and, when it fails,
why, including the pods' `plumbing_error` from the API when there is one.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from meshwire.control.lab.frames import frame_passes
from meshwire.control.lab.icmp import answers
from meshwire.control.lab.kernel import Ends
from meshwire.control.lab.links import LabEnd, LabLink
from meshwire.control.lab.names import LabNames

PING_TIMEOUT = 5.0
FRAME_TIMEOUT = 3.0
# Links checked at once: each mostly waits for an answer, so more than the cores.
PARALLEL = 32


@dataclass(frozen=True, slots=True)
class LinkResult:
    link: LabLink
    ok: bool
    method: str  # ping | frame | exists | skip
    reason: str = ""

    def line(self) -> str:
        verdict = "skip" if self.method == "skip" else "ok  " if self.ok else "FAIL"
        why = f": {self.reason}" if self.reason else ""
        link = self.link
        return f"{verdict} {link.namespace}/{link.uid} {link.kind} {self.method} {link.name}{why}"


def end_netns(names: LabNames, end: LabEnd) -> str:
    namespace, _, pod = end.pod.partition("/")
    return names.pod_netns(namespace, pod)


def pod_ends(link: LabLink) -> tuple[LabEnd, ...]:
    """The ends of `link` that are in pods (a host link's `b` end is the node's)."""
    return (link.a,) if link.b.pod == "localhost" else (link.a, link.b)


def _end_problem(names: LabNames, ends: Ends, end: LabEnd) -> str | None:
    ns = end_netns(names, end)
    state = ends.get(ns, end.intf)
    if not state.exists:
        return f"{end.pod}: interface {end.intf} missing (netns {ns})"
    if not state.admin_up:
        return f"{end.pod}: interface {end.intf} is down"
    if not state.up:
        return f"{end.pod}: interface {end.intf} has no carrier"
    return None


def check_link(
    names: LabNames, link: LabLink, ends: Ends, errors: dict[str, str] | None = None
) -> LinkResult:
    """One link's result; `errors` maps a pod (`ns/name`) to its Topology's plumbing_error."""
    if link.unwired:
        return LinkResult(link, True, "skip", link.unwired)
    problems = [p for p in (_end_problem(names, ends, end) for end in pod_ends(link)) if p]
    if problems:
        blamed = [
            f"plumbing_error of {end.pod}: {errors[end.pod]}"
            for end in pod_ends(link)
            if errors and errors.get(end.pod)
        ]
        return LinkResult(link, False, "exists", "; ".join(problems + blamed))
    if link.b.pod == "localhost":
        return _host_frames(names, link)
    if link.a.address and link.b.address:
        return _ping(names, link)
    return _frames(names, link)


def _ping(names: LabNames, link: LabLink) -> LinkResult:
    target = link.b.address
    try:
        answered = answers(end_netns(names, link.a), link.a.intf, target, PING_TIMEOUT)
    except OSError as exc:
        return LinkResult(link, False, "ping", f"{target} from {link.a.pod}: {exc.strerror or exc}")
    if answered:
        return LinkResult(link, True, "ping")
    return LinkResult(
        link, False, "ping", f"{target} from {link.a.pod}: no reply within {PING_TIMEOUT:g}s"
    )


def _frames(names: LabNames, link: LabLink) -> LinkResult:
    a = (end_netns(names, link.a), link.a.intf, f"{link.a.pod}:{link.a.intf}")
    b = (end_netns(names, link.b), link.b.intf, f"{link.b.pod}:{link.b.intf}")
    return _both_ways(link, a, b, rx_all=False)


def _host_frames(names: LabNames, link: LabLink) -> LinkResult:
    pod = (end_netns(names, link.a), link.a.intf, f"{link.a.pod}:{link.a.intf}")
    port = names.hub_port(link.a_node)
    wire = (names.hub_netns, port, f"{link.a_node}:{link.b.intf} (underlay port {port})")
    return _both_ways(link, pod, wire, rx_all=True)


def _both_ways(
    link: LabLink, a: tuple[str, str, str], b: tuple[str, str, str], rx_all: bool
) -> LinkResult:
    """A frame from a to b (b listening for all protocols if `rx_all`), then from b to a."""
    for (src_ns, src, src_name), (dst_ns, dst, dst_name), listen_all in (
        (a, b, rx_all),
        (b, a, False),
    ):
        direction = f"{src_name} -> {dst_name}"
        try:
            passed = frame_passes(src_ns, src, dst_ns, dst, FRAME_TIMEOUT, rx_all=listen_all)
        except OSError as exc:
            return LinkResult(link, False, "frame", f"{direction}: {exc.strerror or exc}")
        if not passed:
            return LinkResult(link, False, "frame", f"{direction}: frame not received")
    return LinkResult(link, True, "frame")


def check_all(
    names: LabNames, links: list[LabLink], errors: dict[str, str] | None = None
) -> list[LinkResult]:
    """One result per link, in the order given; `errors` as for `check_link`."""
    ends = Ends(end_netns(names, end) for link in links for end in pod_ends(link))
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        return list(pool.map(lambda link: check_link(names, link, ends, errors), links))


def tally(results: list[LinkResult]) -> str:
    """The closing line of `check`: `N/M links ok[, K failed][, S skipped]`."""
    skipped = sum(r.method == "skip" for r in results)
    failed = sum(not r.ok for r in results)
    checked = len(results) - skipped
    return (
        f"{checked - failed}/{checked} links ok"
        + (f", {failed} failed" if failed else "")
        + (f", {skipped} skipped (nothing wires them)" if skipped else "")
    )
