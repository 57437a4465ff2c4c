"""What `/links` answers: every link end this node must realise, with its state.

One entry per row of the links table, sorted by key: the kind, where the end
is (pod, interface, netns, MAC), what it joins (the peer pod, its interface,
MAC, and its netns on this node or, across nodes, its node), each end's
impairments (those of the frames it sends) and the cable (`cable`: `down`
while pulled), and the reconcile state with the last error and how many
attempts failed since the last success. A node's operator reads it to learn
why one link is down without reading the logs;
`?state=error` keeps the failing ones. With `counters` (`?counters=1`) each
end this node realises (the local one; a veth's both) carries its kernel
counters (`link_counters.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from meshwire.control.tables.health import Health, State
from meshwire.control.tables.links import LinkRow


def link_report(
    rows: Iterable[tuple[LinkRow, Health]],
    state: str = "",
    counters: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The entries for `rows` (each with its health, `LinksTable.with_health`); only
    those in `state` (a `State` value) unless "";
    `counters` maps (netns, intf) to an end's counters."""
    if state and state not in set(State):
        raise ValueError(f"state {state!r} is not one of {', '.join(State)}")
    out = []
    for row, health in sorted(rows, key=lambda r: r[0].key):
        if state and health.state != state:
            continue
        entry: dict[str, Any] = {
            "link": f"{row.namespace}/{row.uid}",
            "key": row.key,
            "kind": row.kind.value,
            "local": {
                "pod": f"{row.namespace}/{row.local.pod}",
                "intf": row.local.intf,
                "netns": row.local.netns,
                "mac": row.local.mac,
                "impairments": row.local.impairments.to_dict(),
            },
            "peer": {
                "pod": f"{row.namespace}/{row.peer.pod}",
                "intf": row.peer.intf,
                "netns": row.peer.netns,
                "mac": row.peer.mac,
                "node_ip": row.peer_node_ip,
                "impairments": row.peer.impairments.to_dict(),
            },
            "cable": "down" if row.down else "up",
            # A link under emulation is carried by the workers (a grpc end, rebuilt
            # once from the kernel's veth or vxlan when its emulation began).
            "emulated": row.emulated,
            "state": health.state.value,
            "error": health.message,
            "attempts": health.attempts,
            "permanent": health.permanent,
        }
        if counters is not None:
            for side, end in zip(("local", "peer"), row.ends(), strict=False):
                entry[side]["counters"] = dict(counters.get((end.netns, end.intf), {}))
        out.append(entry)
    return out
