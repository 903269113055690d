"""The floors hold: import-linter's contracts in pyproject.toml ([tool.importlinter]) pass on the installed layout.

In the repository `model_wrappers/` and `tasks/` sit beside `vrh_lmms/`; installed they are `vrh_lmms.model_wrappers`
and `vrh_lmms.tasks` (setup.py). The test lays out that installed shape with symbolic links in a temporary folder
and runs the real `lint-imports` there, so the harness floor's mapped packages are checked with the rest.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def installed_layout(tmp_path: Path) -> Path:
    """A folder whose `vrh_lmms` package is the repository's, with model_wrappers/ and tasks/ linked inside."""
    pkg = tmp_path / "vrh_lmms"
    pkg.mkdir()
    for entry in (REPO / "vrh_lmms").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    (pkg / "model_wrappers").symlink_to(REPO / "model_wrappers")
    (pkg / "tasks").symlink_to(REPO / "tasks")
    return tmp_path


def lint_imports(root: Path, config: Path = REPO / "pyproject.toml") -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    if exe is None:
        pytest.fail("lint-imports not found: install the test extra (pip install -e '.[test]')")
    env = dict(os.environ, PYTHONPATH=str(root))
    # run from the layout folder: lint-imports puts the working folder first on the import path
    return subprocess.run([exe, "--no-cache", str(config)], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)


def test_every_floor_imports_only_the_floors_below_it(tmp_path):
    proc = lint_imports(installed_layout(tmp_path))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken." in proc.stdout, proc.stdout[-2000:]


def test_an_upward_import_breaks_the_floors(tmp_path):
    """The control: the same check on a copy of the base floor that imports a run is refused, naming the import."""
    root = installed_layout(tmp_path)
    base = root / "vrh_lmms" / "base"
    base.unlink()
    shutil.copytree(REPO / "vrh_lmms" / "base", base, ignore=shutil.ignore_patterns("__pycache__"))
    with open(base / "heads" / "spec.py", "a") as f:
        f.write("\nfrom vrh_lmms.runs.sweep import plan  # noqa: E402,F401\n")
    proc = lint_imports(root)
    assert proc.returncode != 0
    assert "vrh_lmms.base is not allowed to import vrh_lmms.runs" in proc.stdout, proc.stdout[-3000:]
    assert "vrh_lmms.base.heads.spec -> vrh_lmms.runs.sweep.plan" in proc.stdout
