"""The paper's own figures: which checkpoint they belong to, and that the asset holds what paper-protocol.md says."""

from __future__ import annotations

import pytest

from vrh_lmms.replicate.paper_figures import match_paper_model, paper_figures, paper_row


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
