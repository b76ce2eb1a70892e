"""attncheck's import graph has no cycle at any level, and the static half keeps its layering.

Every import counts, ``TYPE_CHECKING`` ones included: a cycle there is still a
reader's loop. The graph is read with ``ast`` so that nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import attncheck

PACKAGE = Path(attncheck.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(under: str) -> dict[str, Path]:
    root = PACKAGE.parent.joinpath(*under.split("."))
    return {_module_name(path): path for path in root.rglob("*.py")}


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``path`` imports (a name imported from a package counts as
    its submodule when there is one)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _graph(under: str) -> dict[str, set[str]]:
    modules = _modules(under)
    return {name: _imports(path, name, set(modules)) for name, path in modules.items()}


def _cycle_from(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph``, or None (a depth-first search for a back edge)."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for successor in sorted(graph[node]):
            if state.get(successor) == "open":
                return [*path[path.index(successor):], successor]
            if successor not in state and (cycle := visit(successor)) is not None:
                return cycle
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_the_package_has_no_import_cycle() -> None:
    graph = _graph("attncheck")
    assert {"attncheck.pipeline", "attncheck.dynamic.runner", "attncheck.static.engine"} <= set(graph)
    cycle = _cycle_from(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_static_package_has_no_import_cycle() -> None:
    graph = _graph("attncheck.static")
    assert "attncheck.static.context" in graph
    assert _cycle_from(graph) is None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle_from({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle_from({"a": {"b"}, "b": set()}) is None


def test_nothing_under_static_imports_the_engine() -> None:
    graph = _graph("attncheck.static")
    importers = sorted(name for name, imported in graph.items() if "attncheck.static.engine" in imported)
    assert importers == []


# tree <- facts <- context <- analysis <- rules <- engine: what each layer may not import.
_LAYERS = {
    "attncheck.static.tree": ("attncheck.static.facts", "attncheck.static.context", "attncheck.static.analysis",
                              "attncheck.static.rules", "attncheck.static.engine"),
    "attncheck.static.facts": ("attncheck.static.context", "attncheck.static.analysis", "attncheck.static.rules"),
    "attncheck.static.context": ("attncheck.static.analysis", "attncheck.static.rules"),
    "attncheck.static.analysis": ("attncheck.static.rules",),
}


@pytest.mark.parametrize("layer", sorted(_LAYERS))
def test_a_layer_imports_nothing_above_it(layer: str) -> None:
    graph = _graph("attncheck.static")
    upward = sorted(
        (name, imported)
        for name, imports in graph.items() if name == layer or name.startswith(layer + ".")
        for imported in imports if imported.startswith(_LAYERS[layer])
    )
    assert upward == []
