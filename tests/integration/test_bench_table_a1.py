"""The GPU benchmark of the Table A1 row runs end to end at tiny shape on CPU (so it cannot fail on an import or a
renamed API when a GPU session runs it), and its prefill FLOP count matches torch's own FLOP counter."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"))
import bench_table_a1_7b as bench  # noqa: E402

torch.set_num_threads(1)


def test_tiny_dry_run_writes_every_figure(tmp_path):
    out = tmp_path / "a1.json"
    assert bench.main(["--tiny", "--json", str(out)]) == 0
    parts = json.loads(out.read_text())["parts"]
    assert set(parts) == {"setup", "throughput", "decode", "vision", "prefill", "host"}
    assert {(r["mode"], r["docs_per_call"]) for r in parts["throughput"]} == {
        (m, d) for m in ("static", "dynamic") for d in (1, 2)}
    assert {(r["mode"], r["rows"]) for r in parts["decode"]} == {(m, r) for m in ("static", "dynamic") for r in (1, 4)}
    for r in parts["throughput"]:
        assert r["gen_per_s"] > 0 and math.isclose(r["table_a1_min"], bench.TABLE_A1_GENERATIONS / r["gen_per_s"] / 60)
    assert parts["host"][0]["ms_per_doc"] > 0 and parts["vision"][0]["ms_per_image"] > 0


def test_lm_flop_matches_torch_flop_counter():
    """torch's counter sees the projections, the MLP and the LM head (the CPU sdpa kernel goes uncounted): they equal
    our count less its causal attention term (2 x 2 x heads x head_dim x seq^2 / 2 per layer and row)."""
    from torch.utils.flop_counter import FlopCounterMode

    from vrh_lmms.model.backbone import locate_decoder

    model, processor = bench.build("tiny", "cpu", torch.float32, None, 64)
    g = locate_decoder(model).geometry
    rows, seq = 2, 37
    ids = torch.randint(0, 100, (rows, seq))
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(input_ids=ids, use_cache=False, logits_to_keep=1)
    causal_attention = 2 * g.heads * g.head_dim * seq * seq * g.layers * rows
    assert counter.get_total_flops() == bench.lm_flop(g, model.config.text_config, rows, seq) - causal_attention
