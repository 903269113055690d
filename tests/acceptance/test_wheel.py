"""A wheel install works as well as the editable one: the wheel is built from the repository's tracked files, installed
into a fresh virtual environment outside the repository, and its commands run from yet another folder.

The fresh environment gets the dependencies of the running one through a `.pth` line (installing torch again would
cost minutes and gigabytes); that adds their folders to sys.path without running their `.pth` files, so the editable
install of this checkout cannot leak in. The test checks that vrh_lmms is imported from the fresh environment.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import offline_env

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
# Not part of the distribution; copying them would only slow the build down.
NOT_PACKAGED = ("docs/", "reports/", "benchmarks/", "tests/", ".ci/")


def _tracked_files() -> list[str]:
    """The files a clean clone has (git's listing), or, outside a git checkout, the package's own folders."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
        return [f for f in out.decode().split("\0") if f and not f.startswith(NOT_PACKAGED)]
    except (OSError, subprocess.CalledProcessError):
        roots = ("vrh_lmms", "model_wrappers", "tasks")
        files = [str(p.relative_to(REPO)) for r in roots for p in (REPO / r).rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts]
        return files + ["pyproject.toml", "setup.py", "README.md"]


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory):
    """(python, bin folder, site-packages) of a fresh venv holding only the built wheel."""
    import setuptools

    if tuple(int(x) for x in setuptools.__version__.split(".")[:2]) < (77, 0):
        pytest.fail(f"setuptools {setuptools.__version__} cannot build this project (>= 77 needed); "
                    "install the test extra: pip install -e '.[test]'")
    root = tmp_path_factory.mktemp("wheel")
    src, dist = root / "src", root / "dist"
    for rel in _tracked_files():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, src / rel)
    env = offline_env(PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    # Built with this environment's setuptools: no build isolation, no index, as offline as the rest of the suite.
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist),
          str(src)], cwd=root, env=env)
    wheels = list(dist.glob("vrh_lmms-*.whl"))
    assert len(wheels) == 1, wheels

    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root, env=env)
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=root, env=env).stdout.strip())
    deps = [p for p in dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *sys.path])
            if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]
    (site / "_vrh_test_deps.pth").write_text("\n".join(deps) + "\n")
    _run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", str(wheels[0])], cwd=root, env=env)
    return python, venv / "bin", site


@pytest.fixture
def elsewhere(tmp_path):
    """A working folder outside the repository and outside the venv."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    assert REPO not in folder.parents
    return folder


def test_the_wheel_is_what_runs(wheel_env, elsewhere):
    python, _, site = wheel_env
    out = _run([str(python), "-c", "import vrh_lmms, importlib.metadata as m; print(vrh_lmms.__file__); "
                "print(m.distribution('vrh-lmms').locate_file(''))"], cwd=elsewhere, env=offline_env()).stdout
    module, dist = out.split()
    assert Path(module).is_relative_to(site), f"vrh_lmms imported from {module}, not from the wheel install"
    assert Path(dist).resolve() == site.resolve(), dist


def test_tasks_path_and_lmms_eval_task_listing(wheel_env, elsewhere):
    python, bin_dir, site = wheel_env
    path = Path(_run([str(bin_dir / "vrh-lmms"), "tasks-path"], cwd=elsewhere, env=offline_env()).stdout.strip())
    assert path.is_relative_to(site) and (path / "synth" / "vrh_synth_grounding.yaml").is_file(), path
    listing = _run([str(python), "-m", "lmms_eval", "--tasks", "list", "--include_path", str(path)],
                   cwd=elsewhere, env=offline_env())
    names = {line.strip(" -") for line in (listing.stdout + listing.stderr).splitlines()}
    assert {"vrh_synth_grounding", "vrh_refcoco_val", "vrh_vqa"} <= names, sorted(n for n in names if "vrh" in n)


def test_the_wheel_holds_no_trainer_and_train_tiny_says_where_it_is(wheel_env, elsewhere):
    """The demo model's trainer and designs are research (research/demo_model), not part of what users install:
    `train-tiny` from the wheel refuses in one line that says where the trainer lives."""
    python, bin_dir, site = wheel_env
    shipped = {p.relative_to(site).as_posix() for p in (site / "vrh_lmms").rglob("*.py")}
    trainer = ("demo/train.py", "demo/designs.py", "demo/head_prune.py", "demo_model/train.py")
    assert shipped and not [p for p in shipped if p.endswith(trainer)]
    assert not (site / "research").exists()
    proc = subprocess.run([str(bin_dir / "vrh-lmms"), "train-tiny", "--out", "m"], cwd=elsewhere, env=offline_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and not (elsewhere / "m").exists()
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "research/ folder" in lines[0] and "clone" in lines[0], proc.stderr


def test_demo_runs_from_the_wheel(wheel_env, elsewhere):
    _, bin_dir, _ = wheel_env
    env = offline_env(VRH_CACHE_DIR=str(elsewhere / "cache"))
    _run([str(bin_dir / "vrh-lmms"), "demo", "--output", "run", "--n-discovery", "8", "--n-eval", "10", "--k", "5",
          "--random-seeds", "1"], cwd=elsewhere, env=env)
    out = elsewhere / "run"
    for rel in ("heads.json", "sweep/sweep.json", "report/report.md", "report/report.json", "demo_summary.json"):
        assert (out / rel).is_file(), rel
    assert list((out / "report" / "plots").glob("*.png"))
    row = json.loads((out / "demo_summary.json").read_text())["acceptance"]["rows"][0]
    # the same figures as the editable install's (80-point top-5 drop on these 10 scenes)
    assert row["k"] == 5 and row["topk_drop"] >= 0.3, row
