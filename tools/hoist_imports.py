"""List the imports inside functions of the product code and hoist those that gain nothing by waiting.

The rule (docs/architecture.md): an import sits inside a function only where it keeps a light command light, and it
says so in a comment of the form `# deferred: <why>`. This tool applies it. For every in-function import it decides:

- **hoist**: moved to the module's import block (merged and sorted by `ruff check --select I --fix`);
- **deferred**, justified, and the tool writes the comment above it:
  (a) hoisting would make a light entry point (ENTRY_POINTS: `vrh-lmms --help`, each `vrh-lmms COMMAND --help`,
      `vrh-lmms report` on a sweep folder, `vrh-lmms heads` / reading a heads file, `vrh-lmms tasks-path`, the base
      floor, lmms-eval's plugin manifests) load a heavy module (HEAVY, measured with `python -X importtime`; see
      `measure`) that it does not load today;
  (b) an import cycle (the tool does not guess these: `check` imports every module alone after hoisting, and a
      `# deferred: import cycle ...` comment written by hand where one broke is kept on every rerun);
  (c) an optional dependency: not required by the package's dependencies, or imported under `except ImportError`;
- **manual**: hoisting needs a hand (the name is bound otherwise at module level or in the function, the import
  follows code in its function that it must follow, such as `matplotlib.use("Agg")`, or a module of the package
  sits under `except ImportError`); the tool leaves it and lists it.

An import that already carries a `# deferred:` comment is kept as it is (`--recheck` decides it again).

Usage, from the repository root with the project's environment (it is a developer tool, not in the wheel):

    python tools/hoist_imports.py list [PATH ...]      # every in-function import under PATHs and its decision
    python tools/hoist_imports.py apply [PATH ...]     # hoist, comment the deferrals, ruff-sort the touched files
    python tools/hoist_imports.py check                # every module imports alone in a fresh interpreter, and
                                                       # the light entry points load no heavy module they did not
    python tools/hoist_imports.py measure              # import time of each third-party package the code imports

PATHs are files or folders under vrh_lmms/, model_wrappers/, tasks/ (default: all three). `apply` also records
the entry points' heavy modules before it writes (`--baseline FILE`, default in the temporary folder) so
that `check` compares with them.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# installed name -> folder in the repository (setup.py's ROOTS)
PACKAGES = {"vrh_lmms": "vrh_lmms", "vrh_lmms.model_wrappers": "model_wrappers", "vrh_lmms.tasks": "tasks"}
MARK = "# deferred:"
DEFERRED = re.compile(r"#\s*deferred:")
# the three reasons a deferral may give (docs/architecture.md)
REASON = re.compile(r"keeps .+ free of .+|import cycle\b.*|optional dependency\b.*")

# Third-party packages whose import costs 40 ms or more on their own (`measure`, on the development machine; torch
# 1100, accelerate 1100, sklearn 800, datasets 530, scipy.stats 510, transformers 500, matplotlib.pyplot 300,
# qwen_vl_utils 190, av 150, requests 110, networkx 100, pyarrow 70, decord 55, numpy 51, filelock 51, loguru 41).
# lmms_eval's own top-level module is empty, but anything under it loads torch and its backends.
HEAVY = frozenset({
    "torch", "torchvision", "transformers", "lmms_eval", "accelerate", "datasets", "sklearn", "scipy", "matplotlib",
    "statsmodels", "qwen_vl_utils", "av", "requests", "networkx", "pyarrow", "pandas", "decord", "numpy", "filelock",
    "loguru", "safetensors.torch", "trl", "peft", "librosa", "cv2",
})

# The light entry points: name shown in the deferral comment -> Python run in a fresh interpreter. Each prints
# nothing; the probe adds the print of sys.modules. `{sweep}` is a small sweep folder the probe writes first.
ENTRY_POINTS: dict[str, str] = {
    "vrh-lmms --help": "import vrh_lmms.cli as c\ntry:\n    c.main(['--help'])\nexcept SystemExit:\n    pass",
    "vrh-lmms report": "import vrh_lmms.cli as c\n"
                       "assert c.main(['report', {sweep!r}, '--output', {sweep!r} + '-report', "
                       "'--n-resamples', '100']) == 0",
    "vrh-lmms heads": "import vrh_lmms.cli as c\nassert c.main(['heads', {heads!r}]) == 0",
    "vrh-lmms tasks-path": "import vrh_lmms.cli as c\nassert c.main(['tasks-path']) in (0, None)",
    "the base floor": "import pkgutil, importlib, vrh_lmms.base as b\n"
                      "for m in pkgutil.walk_packages(b.__path__, 'vrh_lmms.base.'):\n"
                      "    importlib.import_module(m.name)",
    "lmms-eval's plugin manifests": "import vrh_lmms.model_wrappers.manifests",
}
COMMAND_HELP = "import vrh_lmms.cli as c\ntry:\n    c.main([{name!r}, '--help'])\nexcept SystemExit:\n    pass"
HEADS_FILE = ROOT / "reports" / "demo" / "heads.json"  # the demo's heads file, kept in the repository


# ----------------------------------------------------------------------------------------------------- reading

@dataclass
class Inner:
    """One import statement inside a function."""

    path: Path
    module: str  # installed name of the module holding it
    node: ast.Import | ast.ImportFrom
    func: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    block: list  # the statement list holding it
    optional_guard: bool  # under `try: ... except ImportError`
    targets: list[str] = field(default_factory=list)  # absolute module names it imports
    bound: list[str] = field(default_factory=list)  # names it binds
    decision: str = ""  # hoist / deferred / manual / kept
    ordered: bool = False  # must run after code before it in its function
    why: str = ""

    @property
    def line(self) -> int:
        return self.node.lineno

    def text(self, lines: list[str]) -> str:
        return " ".join(x.strip() for x in lines[self.node.lineno - 1:self.node.end_lineno])


def module_files() -> dict[str, Path]:
    """Installed module name -> source file."""
    out: dict[str, Path] = {}
    for name, folder in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([name, *parts])] = path
    return out


def absolute(node: ast.ImportFrom, module: str, path: Path) -> str:
    if not node.level:
        return node.module or ""
    anchor = (module if path.name == "__init__.py" else module.rpartition(".")[0]).split(".")
    anchor = anchor[:len(anchor) - (node.level - 1)]
    return ".".join(anchor + ([node.module] if node.module else []))


def targets_of(node: ast.Import | ast.ImportFrom, module: str, path: Path, modules: dict[str, Path]) -> list[str]:
    """The modules a statement imports: `from pkg import sub` names the submodule when it is one."""
    if isinstance(node, ast.Import):
        return [a.name if resolve(a.name, modules) else f"import {a.name}" for a in node.names]
    base = absolute(node, module, path)
    if not resolve(base, modules):  # an external import is kept as a statement: its probe runs it as written
        return [f"from {base} import {a.name}" for a in node.names]
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]


def external_module(target: str) -> str:
    """`from a.b import c` / `import a.b` -> `a.b`."""
    return target.split()[1]


def bound_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.asname or a.name.split(".")[0] for a in node.names]
    return [a.asname or a.name for a in node.names]


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return handler.type is None or any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError")
                                       for n in names)


def inner_imports(module: str, path: Path, modules: dict[str, Path]) -> list[Inner]:
    out: list[Inner] = []

    def walk(node: ast.AST, func, guard: bool) -> None:
        for name, value in ast.iter_fields(node):
            if not isinstance(value, list):
                value = [value]
            for child in value:
                if not isinstance(child, ast.AST):
                    continue
                g = guard or (isinstance(node, ast.Try) and name == "body"
                              and any(_catches_import_error(h) for h in node.handlers))
                if isinstance(child, (ast.Import, ast.ImportFrom)) and func is not None:
                    out.append(Inner(path, module, child, func, value, g, targets_of(child, module, path, modules),
                                     bound_names(child)))
                f = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else func
                walk(child, f, g)

    walk(ast.parse(path.read_text(), str(path)), None, False)
    return out


def module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Import statements that run when the module loads (not under a def, nor under `if TYPE_CHECKING:`)."""
    out = []

    def walk(body: list) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                out.append(stmt)
            elif isinstance(stmt, ast.If):
                if not (isinstance(stmt.test, ast.Name) and stmt.test.id == "TYPE_CHECKING"):
                    walk(stmt.body)
                    walk(stmt.orelse)
            elif isinstance(stmt, ast.Try):
                for b in (stmt.body, stmt.orelse, stmt.finalbody, *[h.body for h in stmt.handlers]):
                    walk(b)
            elif isinstance(stmt, (ast.With, ast.For, ast.While)):
                walk(stmt.body)

    walk(tree.body)
    return out


# ------------------------------------------------------------------------------------------------- the graph

def resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The deepest known module `name` names (`a.b.func` -> `a.b`), or None outside the package."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


class Graph:
    """What importing each module loads: package modules (with their parent packages) and external modules."""

    def __init__(self, modules: dict[str, Path]):
        self.modules = modules
        self.edges: dict[str, set[str]] = defaultdict(set)  # package module -> package modules
        self.external: dict[str, set[str]] = defaultdict(set)  # package module -> external dotted names
        for module, path in modules.items():
            tree = ast.parse(path.read_text(), str(path))
            for node in module_level_imports(tree):
                for target in targets_of(node, module, path, modules):
                    self.add(module, target)
            self.edges[module].update(p for p in parents(module) if p in modules)

    def add(self, module: str, target: str) -> None:
        found = resolve(target, self.modules)
        if found is None:
            self.external[module].add(target)
        elif found != module:
            self.edges[module].add(found)
            self.edges[module].update(p for p in parents(found) if p in self.modules and p != module)

    def copy(self) -> Graph:
        new = Graph.__new__(Graph)
        new.modules = self.modules
        new.edges = defaultdict(set, {k: set(v) for k, v in self.edges.items()})
        new.external = defaultdict(set, {k: set(v) for k, v in self.external.items()})
        return new

    def closure(self, start: Iterable[str]) -> set[str]:
        seen, todo = set(), [m for m in start if m in self.modules]
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(self.edges[m] - seen)
        return seen


def heavy_name(name: str) -> str | None:
    """The HEAVY entry an external dotted name falls under."""
    for cut in [name, *reversed(parents(name))]:
        if cut in HEAVY:
            return cut
    return None


def probe_external(names: set[str]) -> dict[str, set[str]]:
    """External module -> heavy packages importing it loads, each in a fresh interpreter."""
    out = {}
    for name in sorted(names):
        top = heavy_name(external_module(name))
        if top or external_module(name).split(".")[0] in sys.stdlib_module_names:
            out[name] = {top} if top else set()
            continue
        code = (f"import sys, json\ntry:\n    {name}\nexcept Exception:\n    pass\n"
                "print(json.dumps(sorted(sys.modules)))")
        proc = run_python(code)
        if proc.returncode:
            raise SystemExit(f"probing {name!r} failed:\n{proc.stderr[-2000:]}")
        loaded = json.loads(proc.stdout.strip().splitlines()[-1])
        out[name] = {h for h in map(heavy_name, loaded) if h}
    return out


# ---------------------------------------------------------------------------------------------- entry points

def run_python(code: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def write_sweep(folder: Path) -> Path:
    """A small sweep folder in the documented format (tests/support/sweep_files.py writes it)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import numpy as np  # deferred: the tool's `list` needs no numpy
    from support.sweep_files import LineWriter, make_docs, statuses_from, vrh_block, write_manifest  # deferred: tests

    rng = np.random.default_rng(0)
    docs = make_docs(rng, n_images=12)
    folder.mkdir(parents=True)
    write_manifest(folder)
    writer = LineWriter(docs)
    for cid, kind, k, seed in [("baseline", "baseline", None, None), ("top5", "topk", 5, None),
                               ("random5_s0", "random", 5, 0), ("random5_s1", "random", 5, 1)]:
        writer.write(folder, cid, vrh_block(cid, kind, k, seed, heads_model=None if kind == "random" else "org/m"),
                     statuses_from(rng.random(len(docs)) < 0.7, rng))
    return folder


def entry_codes() -> dict[str, str]:
    sys.path.insert(0, str(ROOT))
    from vrh_lmms.cli import TABLE  # deferred: `list` of one file needs no command table

    codes = dict(ENTRY_POINTS)
    codes.update({f"vrh-lmms {c.name} --help": COMMAND_HELP.format(name=c.name) for c in TABLE})
    return codes


def probe_entry_points() -> dict[str, list[str]]:
    """Entry point -> every module it loads (sys.modules after it ran), each in a fresh interpreter."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        sweep = write_sweep(Path(tmp) / "sweep")
        for name, code in entry_codes().items():
            code = code.format(sweep=str(sweep), heads=str(HEADS_FILE))
            code = ("import contextlib, io, json, sys\nwith contextlib.redirect_stdout(io.StringIO()):\n"
                    + textwrap.indent(code, "    ") + "\nprint(json.dumps(sorted(sys.modules)))")
            proc = run_python(code)
            if proc.returncode != 0:
                raise SystemExit(f"entry point {name!r} failed:\n{proc.stderr[-3000:]}")
            out[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def heavy_of(loaded: Iterable[str]) -> set[str]:
    return {h for h in map(heavy_name, loaded) if h}


# ------------------------------------------------------------------------------------------------- deciding

def required_imports() -> set[str]:
    """Top-level import names the package's own dependencies (and theirs, extras aside) install."""
    meta = metadata.metadata("vrh-lmms")
    todo = [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]
    dists: set[str] = set()
    while todo:
        req = re.split(r"[\s<>=!~;\[(]", todo.pop(), maxsplit=1)[0].lower().replace("_", "-")
        if req in dists:
            continue
        dists.add(req)
        try:
            todo += [r for r in metadata.requires(req) or [] if "extra ==" not in r]
        except metadata.PackageNotFoundError:
            pass
    names = {top for top, ds in metadata.packages_distributions().items()
             if any(d.lower().replace("_", "-") in dists for d in ds)}
    return names | set(sys.stdlib_module_names) | {"vrh_lmms"}


def group_head(inner: Inner) -> int:
    """Index in its block of the first of the consecutive import statements `inner` belongs to."""
    first = inner.block.index(inner.node)
    while first > 0 and isinstance(inner.block[first - 1], (ast.Import, ast.ImportFrom)):
        first -= 1
    return first


def mark_of(inner: Inner, lines: list[str]) -> str | None:
    """The text after `# deferred:` of the comment that covers the import: on its own lines, between the statements of
    the group of consecutive imports it belongs to, or in the comment lines above that group, blank lines between
    them or not (one comment may cover a group). None when there is none."""
    n = inner.node
    head = inner.block[group_head(inner)]
    candidates = [x for x in lines[head.lineno - 1:n.end_lineno] if x.strip().startswith("#")]
    candidates += lines[n.lineno - 1:n.end_lineno]
    i = head.lineno - 2
    while i >= 0 and (lines[i].strip().startswith("#") or not lines[i].strip()):  # blank lines may part them
        candidates.append(lines[i])
        i -= 1
    for line in candidates:
        found = DEFERRED.search(line)
        if found:
            return line[found.end():].strip()
    return None


def has_mark(inner: Inner, lines: list[str]) -> bool:
    return mark_of(inner, lines) is not None


def alias_name(node: ast.Import | ast.ImportFrom, alias: ast.alias) -> str:
    return alias.asname or (alias.name.split(".")[0] if isinstance(node, ast.Import) else alias.name)


def binding_key(node: ast.Import | ast.ImportFrom, alias: ast.alias) -> str:
    """What a name is bound to: two imports with the same key bind the same object."""
    if isinstance(node, ast.Import):
        return f"import {alias.name if alias.asname else alias.name.split('.')[0]}"
    return f"from {'.' * node.level}{node.module or ''} import {alias.name}"


def assigned_names(scope: ast.AST) -> set[str]:
    """Names a scope binds other than by import (defs, classes, assignments, loop and with targets, arguments),
    not looking into nested functions or classes."""
    out: set[str] = set()

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(child.name)
            elif isinstance(child, ast.Lambda):
                continue
            elif isinstance(child, ast.Name) and isinstance(child.ctx, (ast.Store, ast.Del)):
                out.add(child.id)
            elif isinstance(child, ast.arg):
                out.add(child.arg)
            else:
                walk(child)

    if isinstance(scope, ast.Lambda):
        walk(scope.args)
        walk(scope.body)
        return out
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        walk(scope.args)
        for stmt in scope.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(stmt.name)
            else:
                walk(stmt)
        return out
    walk(scope)
    return out


def direct_imports(scope: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Import statements of a scope's own body (not of nested functions)."""
    out = []

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                out.append(child)
            elif not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                walk(child)

    for stmt in (scope.body if isinstance(scope.body, list) else [scope.body]):
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            out.append(stmt)
        elif not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            walk(stmt)
    return out


def module_bindings(tree: ast.Module) -> dict[str, set[str]]:
    """Module-level name -> how it is bound: import keys, `type-checking ` + key, or 'other'."""
    out: dict[str, set[str]] = defaultdict(set)
    runtime = module_level_imports(tree)
    for node in direct_imports(tree):
        for alias in node.names:
            key = binding_key(node, alias)
            out[alias_name(node, alias)].add(key if any(node is r for r in runtime) else f"type-checking {key}")
    for name in assigned_names(tree):
        out[name].add("other")
    return out


def follows_its_code(inner: Inner) -> bool:
    """The import must run after code before it in its function: it imports from a package whose module that code
    uses (`import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot`), or that code sets `os.environ`."""
    earlier: dict[str, str] = {}  # bound name -> top-level package
    tops = {(external_module(t) if t.startswith(("import ", "from ")) else t).split(".")[0] for t in inner.targets}
    for stmt in inner.block:
        if stmt is inner.node:
            return False
        if isinstance(stmt, ast.Import):
            earlier.update({alias_name(stmt, a): a.name.split(".")[0] for a in stmt.names})
            continue
        if isinstance(stmt, ast.ImportFrom):
            continue
        names = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
        if any(earlier.get(n) in tops for n in names):
            return True
        if any(isinstance(n, ast.Attribute) and n.attr == "environ" for n in ast.walk(stmt)) and any(
                isinstance(n, (ast.Assign, ast.AugAssign, ast.Call)) for n in ast.walk(stmt)):
            return True
    return False


def clashes(inner: Inner, module_names: dict[str, set[str]]) -> list[str]:
    """Why hoisting would rebind a name: bound otherwise at module level (or under TYPE_CHECKING), or otherwise
    in its function."""
    out = []
    local = assigned_names(inner.func)
    local_imports = defaultdict(set)
    for node in direct_imports(inner.func):
        for alias in node.names:
            local_imports[alias_name(node, alias)].add(binding_key(node, alias))
    for alias in inner.node.names:
        name, key = alias_name(inner.node, alias), binding_key(inner.node, alias)
        held = module_names.get(name, set()) - {key}
        if held:
            out.append(f"{name} is bound otherwise at module level ({', '.join(sorted(held))})")
        elif name in local or local_imports[name] - {key}:
            out.append(f"{name} is bound otherwise in its function")
    return out


def decide(inners: list[Inner], modules: dict[str, Path], graph: Graph, entries: dict[str, list[str]],
           recheck: bool) -> None:
    required = required_imports()
    texts = {p: p.read_text().splitlines() for p in {i.path for i in inners}}
    trees = {p: ast.parse("\n".join(t), str(p)) for p, t in texts.items()}
    bindings = {p: module_bindings(t) for p, t in trees.items()}
    todo = []
    for inner in inners:
        tops = {external_module(t).split(".")[0] for t in inner.targets if resolve(t, modules) is None}
        if not recheck and has_mark(inner, texts[inner.path]):
            inner.decision, inner.why = "kept", "carries a deferral comment"
        elif inner.optional_guard and not tops:
            inner.decision, inner.why = "manual", "a module of the package imported under `except ImportError`"
        elif inner.optional_guard or tops - required:
            inner.decision = "deferred"
            inner.why = f"optional dependency ({', '.join(sorted(tops - required) or tops)}) may be absent"
        elif isinstance(inner.node, ast.ImportFrom) and any(a.name == "*" for a in inner.node.names):
            inner.decision, inner.why = "manual", "star import"
        else:
            inner.ordered = follows_its_code(inner)
            clash = clashes(inner, bindings[inner.path])
            if clash:
                inner.decision, inner.why = "manual", "; ".join(clash)
            else:
                inner.decision = "hoist"
                todo.append(inner)
    # hoisting the same name from two places into one module clashes
    seen: dict[tuple[Path, str], str] = {}
    for inner in todo:
        for alias in inner.node.names:
            key = binding_key(inner.node, alias)
            if seen.setdefault((inner.path, alias_name(inner.node, alias)), key) != key:
                inner.decision = "manual"
                inner.why = f"{alias_name(inner.node, alias)} is imported from two places in the module"
    todo = [i for i in todo if i.decision == "hoist"]

    # (a): the light entry points must not load a heavy module they do not load today. Greedy: the imports of the
    # modules the entry points load come first; each hoist is taken when, with the hoists taken before it, no entry
    # point that reaches its module would load a heavy package it does not load today.
    ext = probe_external({t for i in todo for t in i.targets if resolve(t, modules) is None}
                         | {t for ts in graph.external.values() for t in ts})
    before = {name: heavy_of(loaded) for name, loaded in entries.items()}
    g = graph.copy()
    reach = {name: g.closure(m for m in loaded if m in modules) for name, loaded in entries.items()}
    order = {name: i for i, name in enumerate([*ENTRY_POINTS, *entries])}
    gatekeeper = {m for r in reach.values() for m in r}

    def heavy_in(mods: set[str], externals: Iterable[str]) -> set[str]:
        return {h for m in mods for t in g.external[m] for h in ext.get(t, set())} | \
               {h for t in externals for h in ext.get(t, set())}

    for inner in sorted(todo, key=lambda i: (i.module not in gatekeeper, i.module, i.line)):
        start = [resolve(t, modules) or t for t in inner.targets]
        internal = g.closure(t for t in start if t in modules)
        externals = [t for t in start if t not in modules]
        hurt = {}
        for name, mods in reach.items():
            if inner.module in mods:
                new = heavy_in(internal - mods, externals) - before[name]
                if new:
                    hurt[name] = new
        if hurt:
            first = min(hurt, key=order.get)
            shown = sorted(hurt[first], key=lambda h: (h not in ("torch", "transformers", "lmms_eval"), h))
            inner.decision, inner.why = "deferred", f"keeps `{first}` free of {', '.join(shown[:3])}"
            continue
        if inner.ordered:
            inner.decision, inner.why = "manual", "must run after code before it in its function"
            continue
        for t in inner.targets:
            g.add(inner.module, t)
        for name, mods in reach.items():
            if inner.module in mods:
                mods |= internal


# ------------------------------------------------------------------------------------------------- writing

def top_insert_line(tree: ast.Module) -> int:
    """0-based line after which hoisted imports go: after the last module-level import before the first def/class,
    else after the docstring."""
    after = 0
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            break
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            after = stmt.end_lineno
        elif after == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            after = stmt.end_lineno
    return after


def merged_whys(whys: list[str]) -> list[str]:
    """One reason per entry point (`keeps X free of a; keeps X free of b` -> `keeps X free of a, b`), kept first."""
    keeps: dict[str, list[str]] = {}
    other = []
    for why in whys:
        m = re.fullmatch(r"keeps (`[^`]+`) free of (.+)", why)
        if m:
            have = keeps.setdefault(m[1], [])
            have += [h for h in m[2].split(", ") if h not in have]
        elif why not in other:
            other.append(why)
    return [f"keeps {k} free of {', '.join(v[:3])}" for k, v in keeps.items()] + other


def rewrite(path: Path, inners: list[Inner]) -> bool:
    """Hoist the file's `hoist` imports and comment its `deferred` ones; True when it changed."""
    lines = path.read_text().splitlines(keepends=True)
    tree = ast.parse("".join(lines), str(path))
    edits: list[tuple[int, int, list[str]]] = []  # 0-based [start, end) -> replacement lines
    hoisted: list[str] = []
    gone = {id(i.node) for i in inners if i.decision == "hoist"}
    heads: dict[int, list[Inner]] = defaultdict(list)
    for inner in sorted(inners, key=lambda i: i.line):
        n = inner.node
        if inner.decision == "hoist":
            text = textwrap.dedent("".join(lines[n.lineno - 1:n.end_lineno]))
            if n.lineno == n.end_lineno:  # a trailing comment spoke of the function; the import block needs none
                text = re.sub(r"\s*#.*$", "", text.rstrip("\n"))
            hoisted.append(text.rstrip("\n") + "\n")
            # a block left with nothing in it gets a `pass`
            empty = all(id(s) in gone for s in inner.block)
            pad = " " * n.col_offset
            end = n.end_lineno
            # the last of a group that goes whole takes the blank line after it along
            head = group_head(inner)
            tail = head
            while tail + 1 < len(inner.block) and isinstance(inner.block[tail + 1], (ast.Import, ast.ImportFrom)):
                tail += 1
            whole = all(id(s) in gone for s in inner.block[head:tail + 1])
            blank_before = n.lineno >= 2 and not lines[n.lineno - 2].strip()
            if (whole and n is inner.block[tail] or blank_before) and end < len(lines) and not lines[end].strip():
                end += 1
            edits.append((n.lineno - 1, end, [f"{pad}pass\n"] if empty and n is inner.block[0] else []))
        elif inner.decision == "deferred":
            heads[id(inner.block[group_head(inner)])].append(inner)
    for group in heads.values():
        head = group[0].block[group_head(group[0])]
        whys = merged_whys([i.why for i in group])
        while len(whys) > 1 and head.col_offset + len(MARK) + 1 + len("; ".join(whys)) > 120:
            whys.pop()
        edits.append((head.lineno - 1, head.lineno - 1, [f"{' ' * head.col_offset}{MARK} {'; '.join(whys)}\n"]))
    if not edits:
        return False
    for start, end, replacement in sorted(edits, reverse=True):
        lines[start:end] = replacement
    at = top_insert_line(tree)  # above every edit: those are inside functions, below the import block
    lines[at:at] = hoisted
    path.write_text("".join(lines))
    return True


def ruff_sort(paths: list[Path]) -> None:
    if paths:
        subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "I", "--fix", "--quiet",
                        *map(str, paths)], cwd=ROOT, check=False)


# --------------------------------------------------------------------------------------------------- checking

PRELOAD = ("torch", "transformers", "numpy", "scipy.stats", "matplotlib.pyplot", "PIL.Image", "datasets", "accelerate")
CHILD = textwrap.dedent("""
    import importlib, os, sys, traceback
    for name in {preload!r}:
        try:
            importlib.import_module(name)
        except Exception:
            pass
    failed = {{}}
    for name in sys.argv[1:]:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                importlib.import_module(name)
                code = 0
            except BaseException:
                os.write(w, traceback.format_exc()[-1500:].encode())
                code = 1
            os._exit(code)
        os.close(w)
        err = b""
        while chunk := os.read(r, 65536):
            err += chunk
        os.close(r)
        _, status = os.waitpid(pid, 0)
        if status:
            print(f"@@ {{name}}\\n{{err.decode(errors='replace')}}")
""")


def import_each_alone(modules: Iterable[str]) -> dict[str, str]:
    """Module -> error of `import module` alone: each in a process forked from one that has loaded the big
    third-party packages (PRELOAD) and nothing of ours, nor lmms-eval (which loads our plugin's manifests)."""
    proc = subprocess.run(
        [sys.executable, "-c", CHILD.format(preload=PRELOAD), *sorted(modules)], cwd=ROOT, capture_output=True,
        text=True, timeout=3600, env=dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1",
                                          HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))
    failed = {}
    for block in proc.stdout.split("@@ ")[1:]:
        name, _, err = block.partition("\n")
        failed[name.strip()] = err.strip()
    if proc.returncode:
        failed["(the check itself)"] = proc.stderr[-2000:]
    return failed


# ------------------------------------------------------------------------------------------------- commands

def selected(modules: dict[str, Path], paths: list[str]) -> dict[str, Path]:
    if not paths:
        return modules
    roots = [(ROOT / p).resolve() for p in paths]
    return {m: f for m, f in modules.items() if any(f == r or r in f.parents for r in roots)}


def collect(paths: list[str], exclude: list[str]) -> tuple[dict[str, Path], list[Inner]]:
    modules = module_files()
    chosen = selected(modules, paths)
    skip = selected(modules, exclude) if exclude else {}
    inners = [i for m, f in chosen.items() if m not in skip for i in inner_imports(m, f, modules)]
    return modules, inners


def cmd_list(args: argparse.Namespace, apply: bool = False) -> int:
    modules, inners = collect(args.paths, args.exclude)
    entries = probe_entry_points()
    if apply:
        Path(args.baseline).write_text(json.dumps({k: sorted(heavy_of(v)) for k, v in entries.items()}, indent=1))
    decide(inners, modules, Graph(modules), entries, args.recheck)
    counts = defaultdict(int)
    for inner in inners:
        counts[inner.decision] += 1
        if args.verbose or inner.decision != "kept":
            lines = inner.path.read_text().splitlines()
            why = f"  [{inner.why}]" if inner.why else ""
            print(f"{inner.path.relative_to(ROOT)}:{inner.line}: {inner.decision:8s} {inner.text(lines)[:90]}{why}")
    print(f"{len(inners)} in-function imports: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    if apply:
        by_file = defaultdict(list)
        for inner in inners:
            by_file[inner.path].append(inner)
        touched = [p for p, items in by_file.items() if rewrite(p, items)]
        ruff_sort(touched)
        print(f"rewrote {len(touched)} files; run `python tools/hoist_imports.py check` next")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    modules = module_files()
    chosen = selected(modules, args.paths)
    bad = 0
    failed = import_each_alone(m for m in chosen if not m.endswith("__main__"))
    for name, err in failed.items():
        print(f"{name} does not import alone:\n{textwrap.indent(err, '    ')}")
    bad += len(failed)
    entries = probe_entry_points()
    baseline = json.loads(Path(args.baseline).read_text()) if Path(args.baseline).exists() else {}
    for name, loaded in entries.items():
        new = heavy_of(loaded) - set(baseline.get(name, heavy_of(loaded)))
        if new:
            print(f"{name} now loads {', '.join(sorted(new))}")
            bad += 1
    print(f"{len(chosen)} modules imported alone, {len(failed)} failed; {len(entries)} entry points checked")
    return 1 if bad else 0


def cmd_measure(args: argparse.Namespace) -> int:
    """Cumulative `-X importtime` of each third-party package the code imports (after one warm-up import)."""
    tops = set()
    for path in module_files().values():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                tops.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                tops.add(node.module.split(".")[0])
    for top in sorted(t for t in tops if t not in sys.stdlib_module_names and t != "vrh_lmms"):
        if run_python(f"import {top}").returncode:  # also warms the file cache
            print(f"{top:20s} absent")
            continue
        err = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {top}"], capture_output=True,
                             text=True, cwd=ROOT).stderr
        total = max((int(x.split("|")[1]) for x in err.splitlines() if x.startswith("import time:")
                     and x.split("|")[1].strip().isdigit()), default=0)
        print(f"{top:20s} {total / 1000:8.0f} ms {'heavy' if top in HEAVY else ''}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("list", "apply", "check", "measure"):
        p = sub.add_parser(name)
        p.add_argument("paths", nargs="*", help="files or folders (default: the whole package)")
        p.add_argument("--exclude", action="append", default=[], help="a file or folder to leave alone")
        p.add_argument("--recheck", action="store_true", help="decide again imports that carry a deferral comment")
        p.add_argument("--baseline", default=str(Path(tempfile.gettempdir()) / "vrh-hoist-baseline.json"),
                       help="where `apply` records the entry points' heavy modules for `check`")
        p.add_argument("-v", "--verbose", action="store_true", help="list kept imports too")
    args = parser.parse_args(argv)
    if args.command == "check":
        return cmd_check(args)
    if args.command == "measure":
        return cmd_measure(args)
    return cmd_list(args, apply=args.command == "apply")


if __name__ == "__main__":
    sys.exit(main())
