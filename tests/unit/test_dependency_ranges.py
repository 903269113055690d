"""The declared dependency ranges and what CI installs to check them agree, and a feature with a higher floor than the
package says so in one line instead of misbehaving."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from research.train_tiny import MIN_TRANSFORMERS, check_transformers
from vrh_lmms.base.errors import VRHError

REPO = Path(__file__).resolve().parents[2]


def _declared() -> tuple[dict[str, Requirement], str]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the 3.10 environment runs only the smoke set
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = {Requirement(r).name: Requirement(r) for r in project["dependencies"]}
    return reqs, project["requires-python"]


def _lower_bound(req: Requirement) -> Version:
    floors = [Version(s.version) for s in req.specifier if s.operator in (">=", "==")]
    assert floors, f"{req} has no lower bound"
    return max(floors)


def test_ci_oldest_set_is_the_declared_floor():
    reqs, python = _declared()
    ci = (REPO / ".ci" / "run").read_text()
    block = ci.split("OLDEST=(", 1)[1].split(")")[0]
    oldest = dict(re.findall(r'"(torch|torchvision|transformers)==([0-9.]+)"', block))
    assert set(oldest) == {"torch", "torchvision", "transformers"}, oldest
    for name, pinned in oldest.items():
        floor = _lower_bound(reqs[name])
        assert Version(pinned) in reqs[name].specifier, (name, pinned)
        # the oldest set sits on the floor: same release series (a bug-fix release of it at most)
        assert Version(pinned).release[:2] == floor.release[:2], (name, pinned, str(floor))
    assert 'find_python 3.10' in ci and python == ">=3.10"


def test_train_tiny_names_its_transformers_floor():
    with pytest.raises(VRHError, match=r"transformers >= 5\.18 .* has 5\.17\.0"):
        check_transformers("5.17.0")
    check_transformers(MIN_TRANSFORMERS)
    check_transformers("5.25.0")
