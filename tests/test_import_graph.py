"""The packages of meshwire import each other in docs/design.md §8's layers, with no cycle.

Every import statement of the product code (base/, dataplane/, control/ and tools/),
read with `ast`, becomes an edge between the packages of the importing and the
imported module: `base`, `dataplane` and `proto` are one package each, each
subpackage of `control` and of `tools` is one, and a top-level module of
`tools` (cli.py) counts as the package `tools`. A cycle in that graph fails the
test and names the packages on it; so does an edge to a higher layer than its
own (`LAYERS`, in §8's order), and a package §8 does not place.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.paths import REPO

ROOTS = ("base", "dataplane", "control", "tools")
# Folders whose subpackages are packages of their own in the graph.
SPLIT = ("control", "tools")
# docs/design.md §8's layers, lowest first: a package imports from its own layer
# and the ones below only.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"base"}),
    frozenset({"dataplane", "proto"}),
    frozenset({"control.common"}),
    frozenset({"control.model", "control.tables"}),
    frozenset({"control.informer", "control.links", "control.auth"}),
    frozenset({"control.reconcile", "control.wire"}),
    frozenset({"control.daemon", "control.cni"}),
    frozenset({"tools.api", "tools.client"}),
    frozenset({"tools.lab"}),
    frozenset({"tools.graph"}),
    frozenset({"tools"}),
)  # fmt: skip


def package_of(module: str) -> str | None:
    """`meshwire.control.common.queue` -> `control.common`, `meshwire.tools.cli` -> `tools`,
    `meshwire.base.hostport` -> `base`; None outside meshwire."""
    parts = module.split(".")
    if parts[0] != "meshwire" or len(parts) < 2:
        return None
    if parts[1] in SPLIT and len(parts) > 2 and (REPO / parts[1] / parts[2]).is_dir():
        return f"{parts[1]}.{parts[2]}"
    return parts[1]


def module_of(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["meshwire", *parts])


def imported(path: Path) -> set[str]:
    module = module_of(path)
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.add(target)
            out.update(f"{target}.{alias.name}" for alias in node.names)
    return out


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for root in ROOTS:
        for path in (REPO / root).rglob("*.py"):
            source = package_of(module_of(path))
            if source is None:
                continue
            for target in imported(path):
                dest = package_of(target)
                # `from meshwire.control.x import y` names x's package; a top-level
                # module of tools (cli.py) counts as the package `tools`.
                if dest is not None and dest != source:
                    graph[source].add(dest)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component larger than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_cycle_between_packages() -> None:
    graph = package_graph()
    assert "control.reconcile" in graph and "control.common" in graph["control.reconcile"]
    assert cycles(graph) == []


def test_base_imports_nothing_of_meshwire() -> None:
    assert package_graph().get("base", set()) == set()


def test_dataplane_imports_only_base_and_proto() -> None:
    assert package_graph()["dataplane"] <= {"base", "proto"}


def test_common_imports_only_base() -> None:
    assert package_graph()["control.common"] <= {"base"}


def test_no_package_of_control_imports_the_tools() -> None:
    graph = package_graph()
    assert [
        f"{source} -> {target}"
        for source, targets in sorted(graph.items())
        if source.startswith("control")
        for target in sorted(targets)
        if target.split(".")[0] == "tools"
    ] == []


def layer_of(package: str) -> int | None:
    return next((i for i, layer in enumerate(LAYERS) if package in layer), None)


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a package by one in a lower layer, or of or by a package no layer
    holds, as `importer -> imported`."""
    out = []
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            low, high = layer_of(target), layer_of(source)
            if low is None or high is None or low > high:
                out.append(f"{source} -> {target}")
    return out


def test_packages_import_only_their_own_layer_and_those_below() -> None:
    graph = package_graph()
    packages = set(graph) | {p for targets in graph.values() for p in targets}
    assert {p for p in packages if layer_of(p) is None} == set(), "place it in §8 and LAYERS"
    assert upward(graph) == []


def test_an_upward_import_and_an_unplaced_package_are_found() -> None:
    graph = {
        "control.tables": {"control.reconcile", "control.model"},
        "control.x": {"base"},
        "dataplane": {"control.common"},
        "control.daemon": {"tools.lab"},
    }
    assert upward(graph) == [
        "control.daemon -> tools.lab",
        "control.tables -> control.reconcile",
        "control.x -> base",
        "dataplane -> control.common",
    ]


def test_a_cycle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
