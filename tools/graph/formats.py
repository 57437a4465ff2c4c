"""A `Graph` written as Graphviz dot, Mermaid or JSON. Pure.

The dot text is also what `layout.py` has Graphviz draw, so the `.svg` and the
`.dot` show the same thing: each node a cluster (`cluster_<n>`, id
`node:<name>`) holding its pods (id `pod:<ns/name>`), each link an edge (id
`link:<ns/uid>`, class `link state-<state>`) coloured by its state, labelled
with its kind and any pulled cable or impairment, with each end's interface
and address at that end. The ids are what the live page finds elements by.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping
from typing import Any

from meshwire.tools.graph.model import NO_NODE, Graph, GraphEnd, GraphLink, GraphPod

# State -> colour, the same in every format and on the live page (static/graph.css).
COLOURS = {
    "up": "#2e7d32",
    "placed": "#546e7a",
    "pending": "#f9a825",
    "down": "#c62828",
    "unplaced": "#9e9e9e",
    "pulled": "#6a1b9a",
    "error": "#d84315",
    "unwired": "#bdbdbd",
}
IMPAIRMENT_UNITS = {
    "delay_ms": "ms delay",
    "jitter_ms": "ms jitter",
    "loss_pct": "% loss",
    "corrupt_pct": "% corrupt",
    "duplicate_pct": "% dup",
    "reorder_pct": "% reorder",
    "rate_mbps": " Mbit/s",
}


def to_json(graph: Graph) -> str:
    return json.dumps(graph.to_dict(), indent=1) + "\n"


def impairment_text(impairments: Mapping[str, Any]) -> str:
    """`{delay_ms: 10, loss_pct: 1}` -> `10ms delay, 1% loss` (unknown keys as `key=value`)."""
    parts = []
    for key, value in impairments.items():
        unit = IMPAIRMENT_UNITS.get(key)
        parts.append(f"{value}{unit}" if unit else f"{key}={value}")
    return ", ".join(parts)


def link_label(link: GraphLink) -> str:
    """The words on a link: its kind, then its state unless up, then its ends' impairments."""
    words = [link.kind if link.kind != "none" else "unwired"]
    if link.state not in ("up", "placed", "unwired"):
        words.append(link.state)
    for end in (link.a, link.b):
        if end.impairments:
            words.append(f"{_short(end.pod)}: {impairment_text(end.impairments)}")
    return "\n".join(words)


def to_dot(graph: Graph) -> str:
    ports = _ports(graph)
    lines = [
        f"graph {_quote(graph.title)} {{",
        '  graph [fontname="Helvetica", fontsize=12, rankdir=LR, nodesep=0.35, ranksep=1.1, '
        "outputorder=edgesfirst, pad=0.3];",
        '  node [shape=plain, fontname="Helvetica", fontsize=11];',
        '  edge [fontname="Helvetica", fontsize=10, penwidth=2.5];',
    ]
    by_node: dict[str, list[GraphPod]] = {}
    for pod in graph.pods:
        by_node.setdefault(pod.node, []).append(pod)
    for index, node in enumerate(graph.nodes):
        lines.append(f"  subgraph cluster_{index} {{")
        lines.append(
            f'    id={_quote("node:" + node)}; label={_quote(node)}; style="rounded,filled"; '
            'fillcolor="#f5f5f5"; color="#90a4ae";'
        )
        lines.extend(_pod_line(pod, ports.get(pod.id, {}), "    ") for pod in by_node.get(node, []))
        lines.append("  }")
    lines.extend(_pod_line(pod, ports.get(pod.id, {}), "  ") for pod in by_node.get(NO_NODE, []))
    if "localhost" in ports:
        host = GraphPod("localhost", NO_NODE)
        lines.append(_pod_line(host, ports["localhost"], "  "))
    for link in graph.links:
        attrs = {
            "id": f"link:{link.id}",
            "class": f"link state-{link.state}",
            "color": COLOURS.get(link.state, "#000000"),
            "style": "dashed" if link.state in ("pulled", "unwired", "down") else "solid",
            "label": link_label(link),
            "tooltip": f"{link.id} {link.a.pod}:{link.a.intf} -- {link.b.pod}:{link.b.intf}",
        }
        body = ", ".join(f"{k}={_quote(v)}" for k, v in attrs.items())
        a = f"{_quote(link.a.pod)}:{_quote(_port(link.a.intf))}"
        b = f"{_quote(link.b.pod)}:{_quote(_port(link.b.intf))}"
        lines.append(f"  {a} -- {b} [{body}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_mermaid(graph: Graph) -> str:
    """A Mermaid flowchart: nodes as subgraphs, links labelled `kind: a-intf -- b-intf`,
    each coloured by its state (`linkStyle`)."""
    ids = {pod.id: f"p{index}" for index, pod in enumerate(graph.pods)}
    ids["localhost"] = "host"
    lines = ["flowchart LR"]
    by_node: dict[str, list[str]] = {}
    for pod in graph.pods:
        by_node.setdefault(pod.node, []).append(pod.id)
    for index, node in enumerate(graph.nodes):
        lines.append(f'  subgraph n{index}["{_mermaid_text(node)}"]')
        lines.extend(f'    {ids[p]}["{_mermaid_text(p)}"]' for p in by_node.get(node, []))
        lines.append("  end")
    lines.extend(f'  {ids[p]}["{_mermaid_text(p)}"]' for p in by_node.get(NO_NODE, []))
    styles = []
    for index, link in enumerate(graph.links):
        label = f"{link.kind} {link.state}: {link.a.intf} -- {link.b.intf}"
        for end in (link.a, link.b):
            if end.impairments:
                label += f"; {_short(end.pod)} {impairment_text(end.impairments)}"
        a, b = ids.get(link.a.pod, "host"), ids.get(link.b.pod, "host")
        lines.append(f'  {a} ---|"{_mermaid_text(label)}"| {b}')
        styles.append(
            f"  linkStyle {index} stroke:{COLOURS.get(link.state, '#000')},stroke-width:2px"
        )
    return "\n".join(lines + styles) + "\n"


def _ports(graph: Graph) -> dict[str, dict[str, GraphEnd]]:
    """pod -> its link ends by interface, in link order."""
    out: dict[str, dict[str, GraphEnd]] = {}
    for link in graph.links:
        for end in (link.a, link.b):
            out.setdefault(end.pod, {})[end.intf] = end
    return out


def _port(intf: str) -> str:
    return "if-" + intf


def _pod_line(pod: GraphPod, ends: Mapping[str, GraphEnd], indent: str) -> str:
    """A pod as a table: its name, then one row (a port edges attach to) per interface."""
    border = COLOURS["error"] if pod.error else "#1565c0"
    rows = [f'<TR><TD BGCOLOR="#bbdefb"><B>{_html(pod.id)}</B></TD></TR>']
    for intf in sorted(ends, key=_natural):
        end = ends[intf]
        text = _html(intf) + (f' <FONT COLOR="#455a64">{_html(end.ip)}</FONT>' if end.ip else "")
        rows.append(f'<TR><TD PORT="{_html(_port(intf))}" ALIGN="LEFT">{text}</TD></TR>')
    table = (
        f'<TABLE BORDER="1" CELLBORDER="0" CELLSPACING="0" CELLPADDING="3" COLOR="{border}" '
        f'BGCOLOR="#e3f2fd" STYLE="ROUNDED">{"".join(rows)}</TABLE>'
    )
    attrs = f"id={_quote('pod:' + pod.id)}, label=<{table}>"
    if pod.error:
        attrs += f", tooltip={_quote(pod.error)}"
    return f"{indent}{_quote(pod.id)} [{attrs}];"


def _natural(name: str) -> tuple[Any, ...]:
    """eth2 before eth10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _html(text: str) -> str:
    return html.escape(text, quote=True)


def _short(pod: str) -> str:
    return pod.rsplit("/", 1)[-1]


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _mermaid_text(text: str) -> str:
    return text.replace('"', "#quot;")
