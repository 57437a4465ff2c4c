"""The SVG picture: Graphviz lays out and draws the dot text of `formats.to_dot`.

Graphviz (Debian's `graphviz`, installed by scripts/setup.sh) because it is the
one layout tool that does what this picture needs in one call: node groups as
clusters with their pods inside, pods as tables with a port per interface that
its link ends at, edge labels placed clear of each other, and an SVG whose
elements keep the ids and classes the dot gave them (what the live page
updates). No Python layout library does clusters, ports and label placement.

Two of its engines, by size. Up to `LAYERED_MAX_PODS` pods `dot` (layered,
left to right): edges end at the interface rows and nothing overlaps. Past it
a layered drawing of a mesh grows into one long strip (100 pods on 4 nodes:
770 x 9,770 pt), so `fdp` (force-directed, clusters kept apart) lays it out
in two dimensions instead (1,900 x 1,800 pt, about 0.2-0.35 s on 2 cores),
its edges drawn to the pods.

`svg` raises GraphvizError naming what is missing or what Graphviz said.
"""

from __future__ import annotations

import re
import shutil
import subprocess

from meshwire.tools.graph.formats import to_dot
from meshwire.tools.graph.model import Graph

LAYERED_MAX_PODS = 30
TIMEOUT = 120.0


class GraphvizError(RuntimeError):
    pass


def svg(graph: Graph) -> str:
    """The drawing as an SVG document (no XML prolog, so it can be inlined in a page)."""
    return dot_to_svg(to_dot(graph), engine(graph))


def engine(graph: Graph) -> str:
    return "dot" if len(graph.pods) <= LAYERED_MAX_PODS else "fdp"


def dot_to_svg(dot: str, engine: str = "dot") -> str:
    program = shutil.which("dot")
    if program is None:
        raise GraphvizError("Graphviz's `dot` is not installed (Debian: apt-get install graphviz)")
    try:
        done = subprocess.run(
            [program, f"-K{engine}", "-Tsvg"],
            input=dot,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise GraphvizError(f"Graphviz took more than {TIMEOUT:.0f} s") from None
    if done.returncode != 0:
        raise GraphvizError(f"Graphviz failed: {done.stderr.strip()}")
    # Drop the prolog and doctype: the document stays valid SVG on its own and can
    # be put into an HTML page as it is.
    return re.sub(r"^.*?(?=<svg)", "", done.stdout, count=1, flags=re.S)
