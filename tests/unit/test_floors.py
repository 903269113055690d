"""The floors hold: import-linter's contracts in pyproject.toml ([tool.importlinter]) pass in a checkout and on the
installed layout.

In the repository `model_wrappers/` and `tasks/` sit beside `vrh_lmms/`; installed they are `vrh_lmms.model_wrappers`
and `vrh_lmms.tasks` (setup.py). The contracts name those two as optional members of the harness floor, so a plain
`lint-imports` in a checkout checks every other module; the test also lays out the installed shape with symbolic
links in a temporary folder and runs the real `lint-imports` there, so the mapped packages are checked with the rest.
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


def lint_imports(root: Path, config: Path | None = REPO / "pyproject.toml") -> subprocess.CompletedProcess:
    """The real `lint-imports`, run from `root` (it puts the working folder first on the import path); without
    `config`, plainly, as a developer runs it there (it reads root's pyproject.toml)."""
    exe = shutil.which("lint-imports", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    if exe is None:
        pytest.fail("lint-imports not found: install the test extra (pip install -e '.[test]')")
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run([exe, "--no-cache", *([str(config)] if config else [])], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def test_every_floor_imports_only_the_floors_below_it(tmp_path):
    proc = lint_imports(installed_layout(tmp_path))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken." in proc.stdout, proc.stdout[-2000:]


def test_lint_imports_passes_plainly_in_a_checkout():
    """`lint-imports` in the repository, no arguments: the contracts hold there too."""
    plain = lint_imports(REPO, config=None)
    assert plain.returncode == 0, plain.stdout[-4000:] + plain.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken." in plain.stdout, plain.stdout[-2000:]


def test_the_mapped_packages_are_checked_where_installed(tmp_path):
    """The control of the optional layers: installed, a model wrapper that imports a run breaks the floors."""
    root = installed_layout(tmp_path)
    wrappers = root / "vrh_lmms" / "model_wrappers"
    wrappers.unlink()
    shutil.copytree(REPO / "model_wrappers", wrappers, ignore=shutil.ignore_patterns("__pycache__"))
    with open(wrappers / "manifests.py", "a") as f:
        f.write("\nfrom vrh_lmms.runs.sweep import packs  # noqa: E402,F401\n")
    proc = lint_imports(root)
    assert proc.returncode != 0
    assert "vrh_lmms.model_wrappers.manifests -> vrh_lmms.runs.sweep.packs" in proc.stdout, proc.stdout[-3000:]


def test_an_upward_import_breaks_the_floors(tmp_path):
    """The control: the same check on a copy of the base floor that imports a run is refused, naming the import."""
    root = installed_layout(tmp_path)
    base = root / "vrh_lmms" / "base"
    base.unlink()
    shutil.copytree(REPO / "vrh_lmms" / "base", base, ignore=shutil.ignore_patterns("__pycache__"))
    with open(base / "heads" / "spec.py", "a") as f:
        f.write("\nfrom vrh_lmms.runs.sweep import packs  # noqa: E402,F401\n")
    proc = lint_imports(root)
    assert proc.returncode != 0
    assert "vrh_lmms.base is not allowed to import vrh_lmms.runs" in proc.stdout, proc.stdout[-3000:]
    assert "vrh_lmms.base.heads.spec -> vrh_lmms.runs.sweep.packs" in proc.stdout
