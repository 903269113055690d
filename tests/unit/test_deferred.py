"""Deferred modules (vrh_lmms.harness.deferred): a stand-in that runs the real module, in place, on first use."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap

import pytest

from vrh_lmms.harness import deferred


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package whose import is counted: `runs` holds one entry per execution of its __init__."""
    name = "vrh_deferred_probe"
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("import builtins\nbuiltins.vrh_probe_runs.append(1)\nvalue = 42\n"
                                      "def load(x):\n    return x + 1\n")
    (root / "child.py").write_text("child_value = 'c'\n")
    runs: list[int] = []
    monkeypatch.setattr("builtins.vrh_probe_runs", runs, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, runs
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]


def test_the_module_runs_on_first_use_only(package):
    name, runs = package
    assert deferred.defer(name)
    module = sys.modules[name]
    # what the import system and module walkers read does not run it
    assert hasattr(module, "__file__") and module.__name__ == name and module.__spec__.name == name
    assert module.__path__ and runs == []
    inspect.getmodule(test_the_module_runs_on_first_use_only)  # walks sys.modules, reading each one's __file__
    assert runs == []
    import importlib

    child = importlib.import_module(f"{name}.child")  # a submodule imports through the parent's __path__
    assert child.child_value == "c" and runs == []
    assert module.load(1) == 2 and runs == [1]  # any other attribute: runs it, in place
    assert sys.modules[name] is module and module.value == 42 and type(module).__name__ == "module"
    assert runs == [1]


def test_a_module_imported_already_is_left_as_it_is(package):
    name, runs = package
    import importlib

    real = importlib.import_module(name)
    assert not deferred.defer(name) and sys.modules[name] is real and runs == [1]
    assert not deferred.defer("vrh_no_such_module_anywhere")


def test_lmms_eval_through_the_harness_leaves_evaluate_unloaded_until_used():
    """In a fresh interpreter: importing lmms-eval's registry through the harness does not load `evaluate` (nor the
    transformers pipelines it imports); lmms-eval's own reference to it loads it on first use."""
    code = textwrap.dedent("""
        import sys
        import vrh_lmms.harness.lmms
        import lmms_eval.api.registry as registry
        import lmms_eval.evaluator
        assert type(sys.modules["evaluate"]).__name__ == "_Deferred", type(sys.modules["evaluate"])
        assert "transformers.pipelines" not in sys.modules and "evaluate.evaluator" not in sys.modules
        load = registry.hf_evaluate.load
        import evaluate
        assert load is evaluate.load and registry.hf_evaluate is evaluate and "evaluate.evaluator" in sys.modules
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
