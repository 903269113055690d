"""No import circle in the installed package, counting function-level imports too.

A late (function-level) import hides a circle from Python but not from the design: two modules that need each other
are one module split in two, or share a piece that belongs below both. The test reads every module of `vrh_lmms`
(with `model_wrappers/` and `tasks/`, installed as `vrh_lmms.model_wrappers` and `vrh_lmms.tasks`) with `ast`, builds
the graph of every import statement wherever it sits (module level, functions, `TYPE_CHECKING` blocks), and fails on
each strongly connected component, naming one circle through it. It also refuses any import of the top-level
`research/` folder from the package: research builds on the product, never the other way round.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

from tools.hoist_imports import resolve as _resolve

ROOT = Path(__file__).resolve().parents[2]
# installed name -> folder in the repository (setup.py's ROOTS)
PACKAGES = {"vrh_lmms": ROOT / "vrh_lmms", "vrh_lmms.model_wrappers": ROOT / "model_wrappers",
            "vrh_lmms.tasks": ROOT / "tasks"}


def module_files(packages: dict[str, Path] = PACKAGES) -> dict[str, Path]:
    """Installed module name -> source file, for every .py under the mapped folders."""
    out: dict[str, Path] = {}
    for name, folder in packages.items():
        for path in sorted(folder.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([name, *parts])] = path
    return out


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def imported(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module of the package `module` imports, at any depth of its source."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package, `level - 1` packages up
                anchor = _package_of(module, path).split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import sub` imports the submodule; `from mod import name` imports mod
            targets = [f"{base}.{alias.name}" for alias in node.names] or [base]
        for target in targets:
            found = _resolve(target, modules)
            if found and found != module:
                out.add(found)
    return out


def import_graph(modules: dict[str, Path]) -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for module, path in modules.items():
        graph.add_edges_from((module, target) for target in imported(module, path, modules))
    return graph


def circles(graph: nx.DiGraph) -> list[tuple[list[str], list[str]]]:
    """(one circle, every module of its tangle) for each strongly connected component of more than one module, sorted
    for a stable report."""
    out = []
    for component in nx.strongly_connected_components(graph):
        if len(component) > 1:
            cycle = nx.find_cycle(graph.subgraph(component), source=min(component))
            out.append(([a for a, _ in cycle] + [cycle[0][0]], sorted(component)))
    return sorted(out)


def test_walker_sees_every_kind_of_import(tmp_path):
    """The graph holds module-level, function-level, relative and `from pkg import submodule` imports, and a circle
    made only of a late import is found."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..c import thing\n")
    (pkg / "c.py").write_text("import os\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n")
    modules = module_files({"pkg": pkg})
    graph = import_graph(modules)
    assert set(graph.edges) == {("pkg.a", "pkg.sub.b"), ("pkg.sub.b", "pkg.c"), ("pkg.c", "pkg.a")}
    assert circles(graph) == [(["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"], ["pkg.a", "pkg.c", "pkg.sub.b"])]


def test_the_package_has_no_import_circle():
    """Over the package and the research folder (which builds on it) together."""
    modules = module_files(PACKAGES | {"research": ROOT / "research"})
    assert len(modules) > 100
    assert {"research.demo_model.train", "vrh_lmms.model_wrappers.base", "research.designs"} < set(modules)
    found = circles(import_graph(modules))
    assert not found, "import circles in the package (late imports included):\n" + "\n".join(
        f"{' -> '.join(circle)}  (tangle: {', '.join(members)})" for circle, members in found)


def test_the_package_never_imports_research():
    bad = []
    for module, path in module_files().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            bad += [f"{module} imports {name}" for name in names if name.split(".")[0] == "research"]
    assert not bad, f"the installed package imports the research folder: {bad}"
