"""Imports inside functions only where they keep a light command light, and each says so (docs/architecture.md).

Every import statement inside a function of the product code carries a `# deferred: <why>` comment (on its line, or
above the group of consecutive imports it belongs to); `tools/hoist_imports.py` hoists the others and writes those
comments. The light entry points stay free of torch, transformers and lmms-eval, checked in a fresh interpreter;
the control shows the same check failing on a copy of the package whose light module imports torch at its top.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools.hoist_imports import REASON, ROOT, inner_imports, mark_of, module_files

# Areas still to audit (`tools/hoist_imports.py apply` runs on them, then they leave this list); empty: every
# module of the product follows the policy. Nothing new belongs here.
NOT_YET_AUDITED: tuple[str, ...] = ()
HEAVY = ("torch", "transformers", "lmms_eval")
# what a light entry point runs, in a fresh interpreter; prints the top-level names of sys.modules
LIGHT = {
    "vrh-lmms --help": "import vrh_lmms.cli as c\ntry:\n    c.main(['--help'])\nexcept SystemExit:\n    pass",
    "the base floor": "import importlib, pkgutil, vrh_lmms.base as b\n"
                      "for m in pkgutil.walk_packages(b.__path__, 'vrh_lmms.base.'):\n"
                      "    importlib.import_module(m.name)",
    "reading a heads file": "from vrh_lmms.base.heads.heads_file import load_heads_file\n"
                            "load_heads_file('reports/demo/heads.json')",
}


def unmarked(files: dict[str, Path]) -> list[str]:
    """`path:line: statement` of every in-function import without a deferral comment that gives one of the three
    reasons (a light entry point kept free of a heavy package, an import cycle, an optional dependency)."""
    modules = module_files()
    out = []
    for module, path in files.items():
        lines = path.read_text().splitlines()
        for inner in inner_imports(module, path, modules | files):
            why = mark_of(inner, lines)
            if why is None or not REASON.fullmatch(why):
                shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                out.append(f"{shown}:{inner.line}: {inner.text(lines)}")
    return out


def audited() -> dict[str, Path]:
    pending = [(ROOT / p).resolve() for p in NOT_YET_AUDITED]
    return {m: f for m, f in module_files().items() if not any(f == p or p in f.parents for p in pending)}


def test_every_in_function_import_says_why_it_waits():
    files = audited()
    assert len(files) > 150 and "vrh_lmms.model_wrappers.base" in files and "vrh_lmms.base.console" in files
    bad = unmarked(files)
    assert not bad, (f"{len(bad)} imports inside functions without a `# deferred: <why>` comment: hoist them or say "
                     "why they wait (python tools/hoist_imports.py apply PATH does both):\n" + "\n".join(bad))


def test_the_audit_sees_an_unmarked_import(tmp_path):
    """The control: of six in-function imports, the one with no comment (nor a commented group), the one whose
    comment is about something else and the one whose deferral gives no accepted reason are named; a comment parted
    from its import by a blank line still covers it (else `apply` would write a second one)."""
    path = tmp_path / "mod.py"
    path.write_text("import os\n\n\ndef f():\n    # deferred: keeps `vrh-lmms --help` free of torch\n"
                    "    import torch\n    import numpy\n\n    return os\n\n\ndef g():\n    import json\n"
                    "    return json\n\n\ndef h():\n    x = 1  # deferred: not about the import below\n"
                    "    import csv\n    return csv, x\n\n\ndef k():\n    # deferred: it is faster\n    import re\n"
                    "    return re\n\n\ndef m():\n    x = 1\n    # deferred: keeps `vrh-lmms --help` free of torch\n\n"
                    "    import torch\n    return torch, x\n")
    assert [b.split(": ", 1)[1] for b in unmarked({"pkg.mod": path})] == ["import json", "import csv", "import re"]


def loaded(code: str, pythonpath: Path = ROOT) -> set[str]:
    """Top-level names in sys.modules after `code` ran in a fresh interpreter with `pythonpath` first."""
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    wrapped = ("import contextlib, io, json, sys\nwith contextlib.redirect_stdout(io.StringIO()):\n"
               + "".join(f"    {line}\n" for line in code.splitlines())
               + "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
               + "print(sys.modules['vrh_lmms'].__file__)\n")
    proc = subprocess.run([sys.executable, "-c", wrapped], cwd=pythonpath, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    names, origin = proc.stdout.strip().splitlines()[-2:]
    assert Path(origin).parent == pythonpath / "vrh_lmms", origin  # the package under test, not another copy
    return set(json.loads(names))


@pytest.mark.parametrize("entry", sorted(LIGHT))
def test_light_entry_points_import_no_torch(entry):
    assert not set(HEAVY) & loaded(LIGHT[entry]), f"{entry} loads {sorted(set(HEAVY) & loaded(LIGHT[entry]))}"


def test_a_hoisted_torch_import_in_a_light_module_is_seen(tmp_path):
    """The control: in a copy of the package whose base/errors.py (loaded by every command) imports torch at its top,
    `vrh-lmms --help` and the base floor load torch, and the check above says so."""
    pkg = tmp_path / "vrh_lmms"
    pkg.mkdir()
    for entry in (ROOT / "vrh_lmms").iterdir():
        if entry.name not in ("__pycache__", "base"):
            (pkg / entry.name).symlink_to(entry)
    shutil.copytree(ROOT / "vrh_lmms" / "base", pkg / "base", ignore=shutil.ignore_patterns("__pycache__"))
    with open(pkg / "base" / "errors.py", "a") as f:
        f.write("\nimport torch  # noqa: E402,F401\n")
    for entry in ("vrh-lmms --help", "the base floor"):
        assert "torch" in loaded(LIGHT[entry], tmp_path), entry


# The first commands a person asks for help on: their --help answers in well under a second because their modules load
# none of these (each costs 0.3-2.8 s: torch through the runner, scipy.stats and matplotlib through the demo pipeline).
HELP_HEAVY = (*HEAVY, "scipy", "matplotlib", "statsmodels", "pandas")


@pytest.mark.parametrize("command", ["demo", "discover"])
def test_first_commands_help_loads_no_heavy_library(command):
    code = f"import vrh_lmms.cli as c\ntry:\n    c.main(['{command}', '--help'])\nexcept SystemExit:\n    pass"
    heavy = set(HELP_HEAVY) & loaded(code)
    assert not heavy, f"`vrh-lmms {command} --help` loads {sorted(heavy)}"
