"""torch and torchvision from different builds (a CPU torch beside PyPI's torchvision): a command that loads a model
says so in one line, before anything loads, instead of transformers' 90-line traceback ending in `Could not import
module 'AttentionInterface'`. Run in a fresh interpreter whose `import torchvision` fails as such a pair does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# torchvision's C extension, built for another torch, registers no operators: its first use at import time fails so
BROKEN = '''
import sys
class Broken:
    def find_spec(self, name, path=None, target=None):
        if name == "torchvision":
            raise RuntimeError("operator torchvision::nms does not exist")
sys.meta_path.insert(0, Broken())
from vrh_lmms.cli import main
sys.exit(main(sys.argv[1:]))
'''


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BROKEN, *argv], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("argv", [["demo", "--output", "{tmp}/demo"],
                                  ["steer", "--model", "vrh_qwen25", "--tasks", "t", "--heads-file", "h.json",
                                   "--output", "{tmp}/steer"]], ids=["demo", "steer"])
def test_mismatched_torchvision_is_one_line(argv, tmp_path):
    proc = _run(*(a.format(tmp=tmp_path) for a in argv))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1, proc.stderr
    line = proc.stderr.strip()
    assert line.startswith("vrh-lmms: error: torch ") and "come from different builds" in line
    assert "operator torchvision::nms does not exist" in line and "--index-url" in line
    assert "Traceback" not in proc.stderr and not (tmp_path / argv[0]).exists()  # before anything was written


def test_readme_says_torch_and_torchvision_come_from_one_index():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "torch torchvision --index-url" in readme and "same index" in readme
