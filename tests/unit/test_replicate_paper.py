"""The paper's own figures: which checkpoint they belong to, and that the asset holds what paper-protocol.md says."""

from __future__ import annotations

import pytest

from vrh_lmms.pipelines.replicate.paper_figures import match_paper_model, paper_figures, paper_row


@pytest.mark.parametrize("pretrained, expected", [
    ("Qwen/Qwen2.5-VL-7B-Instruct", "Qwen2.5-VL-7B"),
    ("/models/hub/Qwen2.5-VL-7B-Instruct/", "Qwen2.5-VL-7B"),  # a local snapshot named after its hub repository
    ("OpenGVLab/InternVL3_5-8B-HF", "InternVL3.5-8B"),
    ("OpenGVLab/InternVL3-8B", "InternVL3-8B"),
    ("Qwen/Qwen2.5-VL-3B-Instruct", None),  # another size of the family is not the paper's model
    ("/work/vrh_lmms/assets/demo_model", None),
    (None, None),
])
def test_checkpoints_are_matched_by_hub_id_or_snapshot_name_only(pretrained, expected):
    assert match_paper_model(pretrained) == expected


def test_headline_and_kcurve_are_the_papers():
    figs = paper_figures()
    assert len(figs["headline"]) == 11  # Fig 6 / Table A12: all eleven models
    row = paper_row("Qwen2.5-VL-7B")
    assert (row["base"], row["random20"], row["vrh20"]) == (86.2, 86.1, 7.5)
    assert row["kcurve"] == {0: 86.2, 1: 85.1, 3: 83.5, 5: 79.3, 10: 9.7, 20: 7.5}
    assert row["kcurve"][0] == row["base"] and row["kcurve"][20] == row["vrh20"]
    assert "kcurve" not in paper_row("Magma-8B")
    assert paper_row(None) is None


def _row(k, top, outside, p_out):
    return {"k": k, "mode": "zero", "config": f"top{k}", "baseline_acc": 0.86, "topk_acc": top,
            "topk_drop": 0.86 - top, "topk_drop_ci": [0.5, 0.7], "p_test": 1e-9,
            "random_outside": {"drop_mean": 0.86 - outside, "drop_sd": 0.01, "n": 10},
            "p_random_outside": p_out, "p_random_outside_floor": True, "random": None, "p_random": None}


def _group(model, rows):
    return {"model": model, "task": "t", "summary": rows, "configs": [], "baseline": None}


def test_verdicts_speak_from_the_telling_k_and_of_the_replicated_model_not_its_partner():
    """The k where top-k and random differ most, a warning when the paper's k = 20 breaks random draws too, and the
    partner's group of the same task (sorted first here) never read as the model's."""
    from vrh_lmms.pipelines.replicate.plan import ReplicateSpec
    from vrh_lmms.pipelines.replicate.summary import telling_k, verdicts

    mine = [_row(1, 0.8, 0.85, 0.5), _row(5, 0.2, 0.7, 0.09), _row(20, 0.06, 0.01, 1.0)]
    partner = [_row(1, 0.1, 0.9, 0.09), _row(5, 0.1, 0.9, 0.09), _row(20, 0.1, 0.9, 0.09)]
    assert telling_k({r["k"]: r for r in mine}) == 5
    report = {"groups": [_group("/ckpt/a_partner", partner), _group("/ckpt/mine", mine)],
              "heads_files": [{"layers": 6, "heads": 16}], "transfer": [], "scorers": []}
    spec = ReplicateSpec(model="vrh_qwen25", model_args="pretrained=/ckpt/mine", detection_task="t",
                         grounding_tasks=["t"])
    text = verdicts(spec, report, {})
    assert text[0].startswith("**Masking the top-5 heads (5% of this model's 96 heads) collapses grounding**")
    assert "86.0 → 20.0" in text[0] and "below every draw (empirical p = 0.09, the floor 1/(R+1))" in text[0]
    assert text[1].startswith("**At the paper's k = 20 the comparison says nothing here**")
    assert "accuracy first falls below half the baseline at k = 5" in text[2]
