"""The same seeds draw the same head sets as before: every control kind a sweep plans, on two geometries, with and
without dead heads left out, for several seeds, equals what commit 6ba5d6d's code drew (tests/fixtures/head_draws:
draws.json and the script, with the command, that wrote it)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "head_draws"


def _make_draws():
    spec = importlib.util.spec_from_file_location("make_draws", FIXTURE / "make_draws.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_seeds_draw_the_frozen_head_sets():
    frozen = json.loads((FIXTURE / "draws.json").read_text())
    now = _make_draws().draws()
    assert sorted(now) == sorted(frozen)
    for geometry, specs in frozen.items():
        for spec, by_seed in specs.items():
            for seed, heads in by_seed.items():
                assert now[geometry][spec][seed] == heads, (geometry, spec, seed)
    # the fixture can tell draws apart: seeds give different sets
    assert len({tuple(h) for h in frozen["28x28"]["random5"].values()}) == len(frozen["28x28"]["random5"])
