"""Issue 21: no import cycles among tokscan's modules (imports inside functions included, imports only for type
checking left out), so each module can be read, loaded and tested from the bottom up."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "python" / "tokscan"


def _imports(path: Path, module: str) -> set[str]:
    """The tokscan modules `path` imports at run time (anywhere but under `if TYPE_CHECKING:`)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    typing_only: set[int] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            typing_only.update(id(n) for child in node.body for n in ast.walk(child))
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - node.level + 1]
            if node.module:
                out.add(".".join([*base, node.module]))
            else:
                out.update(".".join([*base, a.name]) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tokscan"):
            out.add(str(node.module))
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("tokscan"))
    return out


def _graph() -> dict[str, set[str]]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return {m: {d for d in _imports(p, m) if d in modules and d != m} for m, p in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_checker_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_in_the_package():
    graph = _graph()
    assert "tokscan.api" in graph and "tokscan.cli.scan" in graph
    assert "tokscan.report" in graph["tokscan.api"]
    assert _cycles(graph) == []
