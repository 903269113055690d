"""Patching reports read right in both directions (issue 33): a head that carries the whole difference tops the map
whether it is patched clean-into-corrupted (it restores everything) or corrupted-into-clean (it destroys everything),
heads that carry nothing score 0 in both, and the correlation with discovery keeps its sign."""

from __future__ import annotations

import numpy as np
import pytest

from vrh_lmms.base.heads import Geometry, HeadRef
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores
from vrh_lmms.report.interventions import patching_markdown, upgrade_patch_result
from vrh_lmms.runs.interventions.patch_run import PatchSpec, aggregate

G = Geometry(layers=2, heads=3, kv_heads=1, head_dim=4)
CARRIER = HeadRef(1, 2)


def _parts(direction: str, n: int = 6) -> list[dict]:
    """Pairs with LD_clean = 3, LD_corrupt = -1; patching CARRIER moves the patched run all the way (and a second
    head a quarter of the way), the others not at all."""
    rng = np.random.default_rng(0)
    parts = []
    for i in range(n):
        clean, corrupt = 3.0 + rng.normal(0, 0.1), -1.0
        start, end = (corrupt, clean) if direction == "denoise" else (clean, corrupt)
        heads = np.full((G.layers, G.heads), start)
        heads[CARRIER.layer, CARRIER.head] = end
        heads[0, 1] = start + 0.25 * (end - start)
        top = end
        parts.append({"task": "t", "a": 2 * i, "b": 2 * i + 1, "image_id": f"img{i // 2}", "expressions": ["x", "y"],
                      "ld_clean": clean, "ld_corrupt": corrupt, "heads": heads.tolist(),
                      "sets": {"top1": top, "random1_s0": start}})
    return parts


def _result(direction: str) -> dict:
    scores = np.zeros((G.layers, G.heads))
    scores[CARRIER.layer, CARRIER.head], scores[0, 1] = 1.0, 0.5  # discovery ranks the carriers first
    hf = HeadsFile({"id": "tiny"}, G, scores, ranking_from_scores(scores), scoring={"cell": "out,sum,mean"})
    sets = {"top1": {"kind": "topk", "k": 1, "seed": None, "heads": [CARRIER]},
            "random1_s0": {"kind": "random", "k": 1, "seed": 0, "heads": [HeadRef(0, 0)]}}
    spec = PatchSpec(model="m", model_args="", tasks=["t"], heads_file="h.json", ks=[1], direction=direction,
                     min_gap=0.0)
    return aggregate(_parts(direction), sets, hf, G, spec)


@pytest.mark.parametrize("direction,measure", [("denoise", "recovery"), ("noise", "destroyed")])
def test_both_directions_put_the_carrier_first_with_the_same_signs(direction, measure):
    result = _result(direction)
    assert result["measure"] == measure
    assert result["top_heads"][0]["head"] == str(CARRIER) and result["top_heads"][0]["effect"] == pytest.approx(1.0)
    assert result["top_heads"][1]["effect"] == pytest.approx(0.25)
    assert np.median(result["effect"]["mean"]) == pytest.approx(0.0)
    assert result["discovery"]["spearman"]["rho"] > 0.5
    sets = {s["id"]: s for s in result["sets"]}
    assert sets["top1"]["effect"] == pytest.approx(1.0) and sets["random1_s0"]["effect"] == pytest.approx(0.0)
    # every pair gave the random set exactly 0: a flagged zero-width t interval, not a binomial [0, 49]%
    assert sets["random1_s0"]["ci"] == [0.0, 0.0] and sets["random1_s0"]["degenerate"]
    text = patching_markdown(result)
    verb = "restores" if direction == "denoise" else "destroys"
    assert f"{verb} at most **100.0%**" in text and f"the median head {verb} 0.0%" in text
    assert f"| {measure} % [95% CI] |" in text and "| random1_s0 | 1 | 0.0 [0.0, 0.0] * |" in text


def test_a_version_1_noise_result_is_read_the_right_way_round():
    """vrh-patch/1 stored the denoising ratio in both directions (a head doing nothing at 100%): read back, a noise
    result reports the share destroyed, its heads ordered by it and its correlations' signs flipped to match."""
    new = _result("noise")
    old = dict(new, schema="vrh-patch/1")
    for key in ("effect", "measure"):
        old.pop(key)
    rec = 1.0 - np.asarray(new["effect"]["mean"])
    old["recovery"] = {"mean": rec.tolist(), "se": new["effect"]["se"]}
    old["sets"] = [{k: v for k, v in s.items() if k != "effect"} | {"recovery": 1.0 - s["effect"],
                   "ci": [1.0 - s["ci"][1], 1.0 - s["ci"][0]]} for s in new["sets"]]
    old["top_heads"] = sorted(({k: v for k, v in h.items() if k != "effect"} | {"recovery": 1.0 - h["effect"]}
                               for h in new["top_heads"]), key=lambda h: -h["recovery"])
    old["discovery"] = dict(new["discovery"], spearman={"rho": -new["discovery"]["spearman"]["rho"], "p": 0.1},
                            kendall={"tau": -new["discovery"]["kendall"]["tau"], "p": 0.1})
    up = upgrade_patch_result(old)
    assert up["measure"] == "destroyed" and up["top_heads"][0]["head"] == str(CARRIER)
    np.testing.assert_allclose(up["effect"]["mean"], new["effect"]["mean"])
    assert up["discovery"]["spearman"]["rho"] == pytest.approx(new["discovery"]["spearman"]["rho"])
    assert "destroys at most **100.0%**" in patching_markdown(old)


def test_unavailable_draws_of_one_configuration_share_one_line():
    from vrh_lmms.report.pools import grouped_draws

    rows = [{"folder": "f", "id": f"layer_matched5_s{i}", "reason": "r5"} for i in range(10)]
    rows += [{"folder": "f", "id": "layer_matched5_s0_mean", "reason": "r5"},
             {"folder": "f", "id": "layer_matched9_s3", "reason": "r9"}, {"folder": "f", "id": "odd", "reason": "r9"}]
    assert grouped_draws(rows) == {("f", "r5"): "layer_matched5_s0-s9 (10 draws), layer_matched5_s0_mean",
                                   ("f", "r9"): "layer_matched9_s3, odd"}
