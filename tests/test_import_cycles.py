"""Issues 21 and 47: no import cycles among tokscan's modules, so each module can be read, loaded and tested from
the bottom up.

The graph this test builds, and the rules it follows:

- A node is a module of `python/tokscan`: every `.py` file (a package is its `__init__.py`) and the compiled core
  `tokscan._core` (its `.pyi` stub: a leaf, it imports no tokscan module).
- Every `import` / `from … import` statement is an edge, wherever it is: at module level, in a function or method,
  in a class body, under `try:` or a plain `if`. Imports under `if TYPE_CHECKING:` are left out (they never run;
  the `else:` branch of such an `if` does run and counts). Relative imports are resolved against the module's
  package. Imports by computed name (`importlib.import_module(name)`) are not seen.
- `import a.b` and `from a.b import name` are edges to `a.b`, except that `from a.b import name` is an edge to the
  submodule `a.b.name` when there is one (`from . import drift`), and to `a.b` otherwise (the name is defined in
  `a/b/__init__.py`, which must have run).
- The packages Python initialises before a module (importing `tokscan.report.drift` first runs `tokscan/__init__.py`
  and `tokscan/report/__init__.py`) are not edges: that is Python's doing, the same for every module, not a
  dependency written in the source. So a package's `__init__` importing its own submodules is an ordinary edge
  down, and a submodule importing a name its parent's `__init__` defines (`from . import Report` in
  `report/drift.py`) is an edge up: with both, the two form a cycle, and this test fails on it.

A cycle is a strongly connected component of more than one module; the failure prints each one with the import
statements (file:line) that close it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "python" / "tokscan"


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name: the `.py` files, and the compiled core by its stub."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")) + sorted(PACKAGE.rglob("*.pyi")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules.setdefault(name, path)
    return modules


def _typing_only(tree: ast.AST) -> set[int]:
    """The nodes under `if TYPE_CHECKING:` (or `if typing.TYPE_CHECKING:`), by id."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            out.update(id(n) for child in node.body for n in ast.walk(child))
    return out


def _imports(path: Path, module: str, modules: dict[str, Path]) -> dict[str, list[int]]:
    """The tokscan modules `path` (module `module`) imports at run time, each with the lines that import it."""
    if path.suffix == ".pyi":
        return {}  # the compiled core: a stub, never run
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _typing_only(tree)
    out: dict[str, list[int]] = {}

    def edge(target: str, line: int) -> None:
        if target in modules and target != module:
            out.setdefault(target, []).append(line)

    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                edge(a.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for a in node.names:
                sub = f"{source}.{a.name}"
                edge(sub if sub in modules else source, node.lineno)
    return out


def _graph() -> tuple[dict[str, set[str]], dict[tuple[str, str], list[int]]]:
    """Module -> the modules it imports; and (importer, imported) -> the importer's lines."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    lines: dict[tuple[str, str], list[int]] = {}
    for m, p in modules.items():
        found = _imports(p, m, modules)
        graph[m] = set(found)
        lines.update({(m, d): ls for d, ls in found.items()})
    return graph, lines


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
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


def _describe(component: list[str], graph: dict[str, set[str]], lines: dict[tuple[str, str], list[int]]) -> str:
    """A cycle's modules and the imports among them, `a -> b (a.py:12)` per edge."""
    modules = _modules()
    inside = set(component)
    edges = []
    for a in component:
        for b in sorted(graph[a] & inside):
            where = ", ".join(f"{modules[a].relative_to(PACKAGE.parent)}:{n}" for n in lines[(a, b)])
            edges.append(f"  {a} -> {b} ({where})")
    return "cycle among " + ", ".join(component) + ":\n" + "\n".join(edges)


def test_the_checker_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_graph_follows_its_rules(tmp_path):
    """Function-level and relative imports count, `from . import name` is the submodule when there is one and the
    package otherwise, `TYPE_CHECKING` imports do not count, and the implicit parent packages are no edges."""
    pkg = tmp_path / "tokscan"
    (pkg / "report").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import _core\n")
    (pkg / "_core.pyi").write_text("import numpy\n")
    (pkg / "errors.py").write_text("")
    (pkg / "report" / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..errors import X\n"
        "def f():\n    from .drift import g\n"
    )
    (pkg / "report" / "drift.py").write_text("from . import Report\nfrom .. import _core\n")
    (pkg / "report" / "ci.py").write_text("import tokscan.report.drift\nfrom tokscan.report import drift\n")
    modules = {
        "tokscan": pkg / "__init__.py",
        "tokscan._core": pkg / "_core.pyi",
        "tokscan.errors": pkg / "errors.py",
        "tokscan.report": pkg / "report" / "__init__.py",
        "tokscan.report.drift": pkg / "report" / "drift.py",
        "tokscan.report.ci": pkg / "report" / "ci.py",
    }
    graph = {m: set(_imports(p, m, modules)) for m, p in modules.items()}
    assert graph == {
        "tokscan": {"tokscan._core"},
        "tokscan._core": set(),
        "tokscan.errors": set(),
        "tokscan.report": {"tokscan.report.drift"},
        "tokscan.report.drift": {"tokscan.report", "tokscan._core"},
        "tokscan.report.ci": {"tokscan.report.drift"},
    }
    assert _cycles(graph) == [["tokscan.report", "tokscan.report.drift"]]


def test_no_import_cycles_in_the_package():
    graph, lines = _graph()
    assert "tokscan.api" in graph and "tokscan.cli.scan" in graph
    assert "tokscan.report" in graph["tokscan.api"]
    assert "tokscan._core" in graph["tokscan.api"]  # `from . import _core`: the compiled core, not the package
    cycles = _cycles(graph)
    assert not cycles, "\n".join(_describe(c, graph, lines) for c in cycles)
