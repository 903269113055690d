"""The scoring design space on hand-made per-sample statistics, against brute-force loops."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.runs.discovery.queries import coord_rows, expression_rows, out_rows, random_row, token_pieces, union_rows
from vrh_lmms.runs.discovery.sample_stats import reduce_sample
from vrh_lmms.runs.discovery.scoring import (
    DEFAULT_CELL,
    all_cells,
    cell_scores,
    parse_cell,
    parse_cells,
    presets_for,
    rank,
    top_k_membership,
)


def fake_samples(n=7, layers=3, heads=4, seed=0):
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(n):
        s = {}
        for q in ("in", "out", "out_coords"):
            s[f"{q}_sum"] = rng.random((layers, heads))
            s[f"{q}_argmax"] = rng.integers(0, 5, (layers, heads)) / 4
        s["retrieval"] = rng.random((layers, heads))
        if i == 3:
            s["out_coords_sum"][:] = np.nan  # a sample with no coordinate tokens
        samples.append(s)
    return samples


def test_cells_cover_design_space():
    cells = all_cells()
    assert len(cells) == 5 * 2 * 2 + 2 and DEFAULT_CELL in cells and "retrieval" in cells
    assert {"out_random1,sum,mean", "in+out,sum,mean", "in+out,argmax,freq", "localization_heads"} <= set(cells)
    assert parse_cells("out,sum,mean+in,argmax,freq") == ["out,sum,mean", "in,argmax,freq"]
    # `in+out` is one query set inside a '+'-separated list
    assert parse_cells("in+out,sum,mean+out_random1,sum,mean+in,sum,freq") == [
        "in+out,sum,mean", "out_random1,sum,mean", "in,sum,freq"]
    assert parse_cells("out,sum,mean+in+out,argmax,mean") == ["out,sum,mean", "in+out,argmax,mean"]
    assert parse_cell("in+out,sum,mean").quantity == "in+out_sum"
    with pytest.raises(VRHError, match="Phi='max'"):
        parse_cell("out,max,mean")
    with pytest.raises(VRHError, match="expected Q,Phi,Omega"):
        parse_cell("out,sum")


def test_mean_and_freq_match_brute_force():
    samples = fake_samples()
    got = cell_scores(samples, "out_coords,sum,mean", freq_top_k=3)
    valid = [s["out_coords_sum"] for s in samples if not np.isnan(s["out_coords_sum"]).all()]
    np.testing.assert_allclose(got, np.mean(valid, axis=0))
    got = cell_scores(samples, "in,sum,freq", freq_top_k=3)
    expect = np.zeros((3, 4))
    for s in samples:
        flat = [(-s["in_sum"][l, h], l, h) for l in range(3) for h in range(4)]
        for _, l, h in sorted(flat)[:3]:
            expect[l, h] += 1 / len(samples)
    np.testing.assert_allclose(got, expect)


def test_freq_ties_are_deterministic():
    scores = np.zeros((1, 2, 2))
    m = top_k_membership(scores, 2)
    assert m[0].tolist() == [[1, 1], [0, 0]]


def test_rank_puts_nan_last_and_breaks_ties_by_position():
    s = np.array([[0.5, np.nan], [0.5, 0.9]])
    assert rank(s) == [(1, 1), (0, 0), (1, 0), (0, 1)]


def test_query_rows_and_expression_span():
    from vrh_lmms.model.tiny.qwen2_5_vl import make_tokenizer

    tok = make_tokenizer()
    prompt = "<|im_start|>user\nLocate the red circle in the image and output its bbox coordinates.<|im_end|>"
    ids = tok(prompt).input_ids
    pieces = token_pieces(tok, ids)
    rows = expression_rows(pieces, "the red circle")
    assert [pieces[i] for i in rows] == ["the", "red", "circle"]
    assert out_rows(10, 3) == [9, 10, 11]
    assert coord_rows(10, ["[", "12", ",", "40", "]"]) == [10, 12]
    assert expression_rows(pieces, "the blue square") == []


def test_expression_span_with_bpe_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(["Locate the red circle in the image", "the reddish circles are round"] * 20,
                            trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=bpe)
    ids = tok("Please: Locate the Red circle, now").input_ids
    pieces = token_pieces(tok, ids)
    rows = expression_rows(pieces, "the red circle")
    assert tok.decode([ids[i] for i in rows]).strip().lower() == "the red circle"


def test_reduce_sample_against_manual():
    torch.manual_seed(0)
    layers, heads, T = 2, 3, 12
    rows = [3, 8, 9, 10]
    mass = torch.rand(layers, heads, len(rows))
    argmax = torch.randint(0, T, (layers, heads, len(rows)))
    box = torch.zeros(T, dtype=torch.bool)
    box[[1, 2, 5]] = True
    seq = torch.randint(0, 5, (T,))
    needle = torch.arange(T) < 8
    q = {"in": [3], "out": [8, 9, 10], "out_coords": [9]}
    got = reduce_sample(mass, argmax, rows, q, box, seq, needle)
    np.testing.assert_allclose(got["out_sum"], mass[:, :, 1:].double().mean(-1).numpy())
    np.testing.assert_allclose(got["in_argmax"], box[argmax[:, :, 0]].double().numpy())
    for l in range(layers):
        for h in range(heads):
            hits = [int(seq[argmax[l, h, c]] == seq[rows[c] + 1] and needle[argmax[l, h, c]]) for c in (1, 2, 3)]
            assert got["retrieval"][l, h] == pytest.approx(np.mean(hits))
    empty = reduce_sample(mass, argmax, rows, {"in": [], "out": [8], "out_coords": []}, box, seq, needle)
    assert np.isnan(empty["in_sum"]).all() and not np.isnan(empty["out_sum"]).any()


def test_presets_resolve_to_the_paper_fig3_cells():
    assert parse_cells("retrieval_heads+qrhead+ocr_heads+vera+vrh+localization_heads") == [
        "out,argmax,mean", "in,sum,mean", "out,sum,mean", "localization_heads"]
    assert parse_cell("qrhead") == parse_cell("in,sum,mean")
    assert presets_for(["in,sum,mean", "out,sum,mean"]) == {"qrhead": "in,sum,mean", "vera": "out,sum,mean",
                                                            "vrh": "out,sum,mean"}
    with pytest.raises(VRHError, match="preset"):
        parse_cell("qr_head")


def test_new_query_sets_against_manual():
    torch.manual_seed(1)
    layers, heads, T = 2, 3, 14
    rows = [2, 3, 8, 9, 10, 11]
    mass = torch.rand(layers, heads, len(rows))
    argmax = torch.randint(0, T, (layers, heads, len(rows)))
    box = torch.zeros(T, dtype=torch.bool)
    box[[1, 5]] = True
    q = {"in": [2, 3], "out": [8, 9, 10, 11], "out_coords": [9]}
    q["out_random1"] = random_row(q["out"], "vrh_synth_grounding__test__4")
    q["in+out"] = union_rows(q["in"], q["out"])
    got = reduce_sample(mass, argmax, rows, q, box, torch.zeros(T, dtype=torch.long), torch.arange(T) < 8)
    col = rows.index(q["out_random1"][0])
    np.testing.assert_allclose(got["out_random1_sum"], mass[:, :, col].double().numpy())
    np.testing.assert_allclose(got["in+out_sum"], mass.double().mean(-1).numpy())
    np.testing.assert_allclose(got["in+out_argmax"], box[argmax].double().mean(-1).numpy())


def test_random_row_is_seeded_by_the_doc_key():
    rows = list(range(40, 60))
    draws = {random_row(rows, f"task__val__{i}")[0] for i in range(200)}
    assert draws == set(rows)  # every row can be drawn
    assert all(random_row(rows, f"task__val__{i}") == random_row(rows, f"task__val__{i}") for i in range(20))
    assert random_row([], "k") == [] and random_row([7], "k") == [7]
