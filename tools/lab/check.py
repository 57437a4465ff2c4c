"""`meshwire lab check`: prove every link of the lab carries traffic.

Per link: both ends must exist and be up in their pods' namespaces (read with
one link dump per namespace); then a link with IPv4 addresses on both ends
must answer ARP for each end's address from the other end (`arp.py`, which
says why not ping), one with IPv6 addresses an ICMPv6 echo from the `a` end
(`icmp.py`), and a link without addresses must pass a raw Ethernet frame in
each direction (`frames.py`). A host link
(macvlan on the node's `eth0`) must pass a raw frame each way between the pod
and the node's underlay: sent by the pod, it is seen leaving the node on the
hub bridge port; sent from that port, the pod receives it. A link whose peer
pod has no Topology is skipped with the reason (no CNI plugin wires it), and
so is a link whose cable is pulled (`state: down` on either end, as the API's
objects say): no frame may pass it.

Links are checked in parallel; each result names the link and, when it fails,
why, including the pods' `plumbing_error` from the API when there is one.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from meshwire.tools.lab import arp, icmp
from meshwire.tools.lab.frames import frame_passes
from meshwire.tools.lab.kernel import Ends
from meshwire.tools.lab.lab_names import LabNames
from meshwire.tools.lab.links import LabEnd, LabLink

PULLED = "cable pulled (state down)"
PROBE_TIMEOUT = 5.0  # an ARP request or echo, re-sent every 0.2 s until answered
FRAME_TIMEOUT = 3.0
# ARP requests sent per second at most, by all links together. Each answered one
# adds an entry to the machine's one ARP table (net.ipv4.neigh.default.gc_thresh3,
# 1024 by default, shared by every namespace) that the kernel can reclaim only
# 5 s later; a full table drops requests unanswered. 150/s keeps it under 800.
ARP_RATE = 150.0
# An unanswered who-has is tried again this many times, this many seconds apart: a
# full table (other labs, other tests on the machine) drops requests for a while.
ARP_RETRIES = 3
ARP_RETRY_PAUSE = 5.0
# Links checked at once: each mostly waits for an answer, so more than the cores.
PARALLEL = 32


class Pacer:
    """Spaces calls to `wait` at least 1/rate seconds apart, across threads."""

    def __init__(self, rate: float) -> None:
        self._gap = 1.0 / rate
        self._next = time.monotonic()
        self._lock = threading.Lock()

    def wait(self) -> None:
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + self._gap
        time.sleep(max(0.0, start - now))


@dataclass(frozen=True, slots=True)
class LinkResult:
    link: LabLink
    ok: bool
    method: str  # arp | ping | frame | exists | skip
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
    names: LabNames,
    link: LabLink,
    ends: Ends,
    errors: dict[str, str] | None = None,
    pacer: Pacer | None = None,
) -> LinkResult:
    """One link's result; `errors` maps a pod (`ns/name`) to its Topology's plumbing_error.

    `pacer` spaces the ARP requests of many links (ARP_RATE); None: unpaced.
    """
    if link.unwired:
        return LinkResult(link, True, "skip", link.unwired)
    if "down" in (link.a.state, link.b.state):
        return LinkResult(link, True, "skip", PULLED)
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
        if ":" in link.a.address or ":" in link.b.address:
            return _ping(names, link)
        return _arp(names, link, pacer)
    return _frames(names, link)


def _arp(names: LabNames, link: LabLink, pacer: Pacer | None) -> LinkResult:
    """Each end asks who-has for the other's address through the link; both must answer."""
    for src, dst in ((link.a, link.b), (link.b, link.a)):
        if pacer is not None:
            pacer.wait()
        what = f"who-has {dst.address} from {src.pod}:{src.intf}"
        try:
            answered = arp.answers(
                end_netns(names, src), src.intf, src.address, dst.address, PROBE_TIMEOUT
            )
        except (OSError, ValueError) as exc:
            return LinkResult(link, False, "arp", f"{what}: {_why(exc)}")
        if not answered:
            return LinkResult(link, False, "arp", f"{what}: no answer within {PROBE_TIMEOUT:g}s")
    return LinkResult(link, True, "arp")


def _ping(names: LabNames, link: LabLink) -> LinkResult:
    target = link.b.address
    what = f"ping {target} from {link.a.pod}:{link.a.intf}"
    try:
        answered = icmp.answers(end_netns(names, link.a), link.a.intf, target, PROBE_TIMEOUT)
    except (OSError, ValueError) as exc:
        return LinkResult(link, False, "ping", f"{what}: {_why(exc)}")
    if answered:
        return LinkResult(link, True, "ping")
    return LinkResult(link, False, "ping", f"{what}: no reply within {PROBE_TIMEOUT:g}s")


def _why(exc: Exception) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)


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
    """One result per link, in the order given; `errors` as for `check_link`.

    A link whose ARP request went unanswered is checked again after the others,
    up to ARP_RETRIES times, each after ARP_RETRY_PAUSE seconds in which the
    kernel can reclaim the table entries of the passes before.
    """
    ends = Ends(end_netns(names, end) for link in links for end in pod_ends(link))
    pacer = Pacer(ARP_RATE)

    def one(link: LabLink) -> LinkResult:
        return check_link(names, link, ends, errors, pacer)

    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        results = list(pool.map(one, links))
        for _ in range(ARP_RETRIES):
            again = [i for i, r in enumerate(results) if r.method == "arp" and not r.ok]
            if not again:
                break
            time.sleep(ARP_RETRY_PAUSE)
            for i, result in zip(again, pool.map(one, [links[i] for i in again]), strict=True):
                results[i] = result
    return results


def tally(results: list[LinkResult]) -> str:
    """The closing line of `check`: `N/M links ok[, K failed][, S skipped]`."""
    skipped = sum(r.method == "skip" and r.reason != PULLED for r in results)
    pulled = sum(r.method == "skip" and r.reason == PULLED for r in results)
    failed = sum(not r.ok for r in results)
    checked = len(results) - skipped - pulled
    return (
        f"{checked - failed}/{checked} links ok"
        + (f", {failed} failed" if failed else "")
        + (f", {skipped} skipped (nothing wires them)" if skipped else "")
        + (f", {pulled} pulled (lab link POD:INTF up plugs them)" if pulled else "")
    )
