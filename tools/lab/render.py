"""Plain-text tables for the lab's summaries and status."""

from __future__ import annotations

from meshwire.tools.client.text_table import table
from meshwire.tools.lab.links import LabLink
from meshwire.tools.lab.state import LabState


def summary(state: LabState, links: list[LabLink]) -> str:
    """The end-of-`up` summary: nodes, pods and links."""
    node_rows = []
    for node in state.nodes.values():
        daemon = state.process(f"daemon/{node.name}")
        node_rows.append((node.name, node.ip, node.netns, daemon.pid if daemon else "-"))
    pod_rows = [(p.key, p.node, p.netns) for p in state.pods.values()]
    link_rows = [
        (
            f"{link.namespace}/{link.uid}",
            link.kind,
            _end(link.a.pod, link.a.intf, link.a.ip),
            _end(link.b.pod, link.b.intf, link.b.ip),
        )
        for link in links
    ]
    return "\n\n".join(
        [
            table("nodes", ("node", "underlay ip", "netns", "daemon pid"), node_rows),
            table("pods", ("pod", "node", "netns"), pod_rows),
            table("links", ("link", "kind", "a", "b"), link_rows),
            f"lab {state.name}: {len(node_rows)} nodes, {len(pod_rows)} pods, "
            f"{len(link_rows)} links; API {state.host_url or state.api_url + ' (hub netns)'}; "
            f"directory {state.directory}",
        ]
    )


def _end(pod: str, intf: str, ip: str) -> str:
    return f"{pod}:{intf}" + (f" {ip}" if ip else "")
