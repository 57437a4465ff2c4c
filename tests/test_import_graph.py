"""No cycle between the packages of meshwire.control (docs/design.md §8).

Every import statement of the product code (control/ and dataplane/), read with
`ast`, becomes an edge between the packages of the importing and the imported
module; `dataplane` is one package, each subpackage of `control` is one. A cycle
in that graph fails the test and names the packages on it.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.paths import REPO

ROOTS = ("control", "dataplane")


def package_of(module: str) -> str | None:
    """`meshwire.control.common.queue` -> `control.common`; None outside meshwire."""
    parts = module.split(".")
    if parts[0] != "meshwire" or len(parts) < 2:
        return None
    if parts[1] == "control" and len(parts) > 2 and (REPO / "control" / parts[2]).is_dir():
        return f"control.{parts[2]}"
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
                # module of control (cli.py) counts as the package `control`.
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


def test_common_imports_no_other_layer() -> None:
    assert package_graph()["control.common"] <= {"dataplane"}


def test_a_cycle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
