"""No two of nvct's modules import each other, even through others: type-only (``if
TYPE_CHECKING:``) and lazy imports count, since each such cycle is a layering knot waiting to
become a runtime one (the work order's types once tied 6 modules of 5 packages together). The
integration harness is held to the same rule (its conftest and harness once imported each other)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _modules(package: str, root: Path = REPO) -> dict[str, Path]:
    out = {}
    for path in (root / package).rglob("*.py"):
        name = ".".join(path.relative_to(root).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _graph(modules: dict[str, Path], package: str) -> dict[str, set[str]]:
    def known(name: str) -> str:
        while name not in modules:  # an imported name: its module
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package):
                targets = [known(f"{node.module}.{a.name}") for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [known(a.name) for a in node.names if a.name.startswith(package)]
            else:
                continue
            graph[module].update(t for t in targets if t != module)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root, targets in graph.items():
        if root in index:
            continue
        work = [(root, iter(sorted(targets)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_the_cycle_finder_finds_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_module_cycle_in_nvct() -> None:
    graph = _graph(_modules("nvct"), "nvct")
    assert len(graph) > 150  # the tree was read
    assert _cycles(graph) == []


def test_no_module_cycle_in_the_integration_harness() -> None:
    graph = _graph(_modules("integration"), "integration")
    assert "integration.conftest" in graph and "integration.harness.deviceplugin" in graph
    assert _cycles(graph) == []
