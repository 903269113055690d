"""Many head sets in one pass, on every tiny real-class family (float32, CPU):

- per-row head masks: a packed forward's rows equal the independent attention-space reference of their own head
  set, and the fold / hook arithmetic of that head set alone;
- packed `generate` gives every configuration the tokens it generates alone (fold ablation), with rows that stop at
  different lengths; any differing row would have to be a logit near-tie (the count is reported; it is zero here);
- the vision tower encodes each image once per packed call; calls that cannot be packed run alone.
"""

from __future__ import annotations

import functools
import random

import pytest
import torch
from oracles.reference_ablation import random_means, reference_ablation

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import HeadRef
from vrh_lmms.base.synth.scenes import SceneConfig, generate_scene
from vrh_lmms.model.ablation import Ablator, RowAblator, RowConfig, ablated
from vrh_lmms.model.backbone import locate_decoder
from vrh_lmms.model.packing import PackedGenerate, alone_length, divergence_gap, fingerprint, packing_unsupported
from vrh_lmms.model.tiny.inputs import as_float32, load_tiny, per_sample_images, render_prompt, scene_messages
from vrh_lmms.model.tiny.registry import TINY_FACTORIES

torch.set_num_threads(1)
NEAR_TIE = 1e-4  # logit gap below which two tokens count as tied in float32


def scenes_batch(processor, n: int = 3, repeat: int = 1) -> dict:
    """A left-padded batch of n scenes with prompts of different lengths; with `repeat`, each row k times in a row
    (row b*k + j), as the processor builds it: the reference layout of a packed batch."""
    convs, images = [], []
    for i in range(n):
        scene = generate_scene(i, 0, SceneConfig(image_size=112, min_size=16, max_size=40))
        conv = scene_messages(scene.expression + " on the left" * i, scene.image)
        convs += [conv] * repeat
        images += [scene.image] * repeat
    batch = processor(text=[render_prompt(processor, c) for c in convs], images=per_sample_images(processor, images),
                      return_tensors="pt",
                      padding=True, padding_side="left")
    batch.pop("labels", None)
    return dict(as_float32(batch))


@pytest.fixture(scope="module", params=sorted(TINY_FACTORIES))
def family(request, tiny_checkpoints):
    model, processor = load_tiny(tiny_checkpoints(request.param))
    decoder = locate_decoder(model)
    g = decoder.geometry
    means = random_means(g)
    return request.param, model, scenes_batch(processor), decoder, means, processor


def draw_configs(decoder, n: int = 7, seed: int = 0) -> list[RowConfig]:
    """Baseline first, then head sets of 1-4 heads anywhere, every third one mean-ablated."""
    g = decoder.geometry
    rng = random.Random(seed)
    every = g.all_heads()  # layer by layer, head by head; a hybrid decoder's attention layers only
    out = [RowConfig(())]
    for i in range(n - 1):
        out.append(RowConfig(tuple(rng.sample(every, 1 + i % 4)), "mean" if i % 3 == 2 else "zero"))
    return out


def greedy(model, batch, **kwargs):
    with torch.no_grad():
        return model.generate(**batch, do_sample=False, num_beams=1, **kwargs)


def alone(model, decoder, batch, configs, means, **kwargs) -> list[torch.Tensor]:
    """What an unpacked sweep generates: one configuration at a time, folded into the weights."""
    ablator, outs = Ablator(model, decoder), []
    try:
        for cfg in configs:
            ablator.apply(cfg.heads, mode=cfg.mode, means=means)
            outs.append(greedy(model, batch, **kwargs))
    finally:
        ablator.restore()
    return outs


def gap_under(model, decoder, batch, cfg: RowConfig, means, want, got, row: int) -> float:
    """divergence_gap with the model set up as `cfg` alone (the configuration that produced `want`)."""
    with ablated(model, cfg.heads, mode=cfg.mode, means=means):
        return divergence_gap(model, batch, want, got, row)


# float32 noise bound where it is larger than 1e-5: Qwen3.5's linear-attention kernels on a batch of another size
# (the packed batch has k times the rows), under logits of std 2 (every other tiny family: std under 0.2)
ALONE_TOL = {"qwen3_5": 1e-4}


def test_row_masks_equal_reference_and_alone(family):
    name, model, batch, decoder, means, processor = family
    configs = draw_configs(decoder)
    k = len(configs)
    with torch.no_grad():
        clean = model(**batch).logits
        refs, folded = [], []
        for cfg in configs:
            with reference_ablation(model, cfg.heads, fill=means if cfg.mode == "mean" else None):
                refs.append(model(**batch).logits)
        for logits_alone in alone_logits(model, decoder, batch, configs, means):
            folded.append(logits_alone)
        for method in ("fold", "hook"):
            with RowAblator(decoder, configs, means=means, method=method) as rows:
                rows.set_rows([c for _ in range(batch["input_ids"].shape[0]) for c in range(k)])
                packed = model(**scenes_batch(processor, repeat=k)).logits
            for j in range(k):
                got = packed[j::k]
                torch.testing.assert_close(got, refs[j], rtol=1e-4, atol=1e-4)
                if method == "fold":
                    tol = ALONE_TOL.get(name, 1e-5)
                    torch.testing.assert_close(got, folded[j], rtol=tol, atol=tol)
                    assert torch.equal(got.argmax(-1), folded[j].argmax(-1)), (name, j)
        assert torch.equal(model(**batch).logits, clean), "uninstalled row masks leave the model untouched"
    assert any(not torch.allclose(r, clean) for r in refs[1:])


def alone_logits(model, decoder, batch, configs, means):
    ablator = Ablator(model, decoder)
    try:
        for cfg in configs:
            ablator.apply(cfg.heads, mode=cfg.mode, means=means)
            yield model(**batch).logits
    finally:
        ablator.restore()


def test_packed_generate_equals_each_configuration_alone(family, record_property):
    name, model, batch, decoder, means, processor = family
    configs = draw_configs(decoder)
    probe = greedy(model, batch, max_new_tokens=4)
    prompt = batch["input_ids"].shape[1]
    # An end-of-sequence token some rows emit early: rows then stop at different lengths, and the packed rows
    # must be cut back to what a batch of only that configuration's rows returns.
    eos = int(probe[0, prompt + 1])
    gen = {"max_new_tokens": 10, "eos_token_id": eos, "pad_token_id": eos}
    want = alone(model, decoder, batch, configs, means, **gen)
    assert len({w.shape[1] for w in want}) > 1 or any((w[:, prompt:] == eos).any() for w in want)
    pack = PackedGenerate(model, decoder, configs, means=means)
    got = []
    with pack, torch.no_grad():
        for j in range(len(configs)):
            pack.serve(j)
            got.append(model.generate(**batch, do_sample=False, num_beams=1, **gen))
    assert pack.stats.packed_calls == 1 and pack.stats.replayed == len(configs) - 1 and pack.stats.solo_calls == 0
    assert pack.stats.rows == [batch["input_ids"].shape[0] * len(configs)]
    differing = []
    for j, (w, g) in enumerate(zip(want, got)):
        if torch.equal(w, g):
            continue
        n = min(w.shape[1], g.shape[1])
        rows = [r for r in range(w.shape[0]) if not torch.equal(w[r, :n], g[r, :n])]
        assert rows, f"{name} config {j}: same tokens, other length {w.shape} vs {g.shape}"
        differing += [(j, r, gap_under(model, decoder, batch, configs[j], means, w, g, r)) for r in rows]
    record_property("differing_rows", len(differing))
    print(f"{name}: {len(differing)} of {len(configs) * batch['input_ids'].shape[0]} packed rows differ")
    assert all(gap < NEAR_TIE for _, _, gap in differing), differing


def test_divergence_gap_is_large_between_really_different_answers(family):
    """The near-tie measure is not blind: where two head sets answer differently, their tokens are far from a tie."""
    name, model, batch, decoder, means, processor = family
    for seed in range(8):
        configs = draw_configs(decoder, n=2, seed=seed)
        a, b = alone(model, decoder, batch, configs, means, max_new_tokens=8, min_new_tokens=8)
        rows = [r for r in range(a.shape[0]) if not torch.equal(a[r], b[r])]
        if rows:
            assert gap_under(model, decoder, batch, configs[0], means, a, b, rows[0]) > NEAR_TIE
            return
    pytest.skip(f"{name}: no two drawn head sets answered differently")


def test_vision_tower_encodes_each_image_once(family):
    name, model, batch, decoder, means, processor = family
    configs = draw_configs(decoder, n=5)
    base = model.base_model
    seen: list[tuple] = []
    original = base.get_image_features

    @functools.wraps(original)  # generate picks the encoder's inputs by its signature
    def counting(*args, **kwargs):
        pixels = kwargs.get("pixel_values", args[0] if args else None)
        seen.append(tuple(pixels.shape))
        return original(*args, **kwargs)

    base.get_image_features = counting
    try:
        greedy(model, batch, max_new_tokens=3)
        plain = list(seen)
        seen.clear()
        with PackedGenerate(model, decoder, configs, means=means) as pack, torch.no_grad():
            model.generate(**batch, do_sample=False, max_new_tokens=3)
        assert pack.stats.packed_calls == 1
    finally:
        del base.get_image_features
    assert plain and seen == plain, (name, plain, seen)


def test_unpackable_calls_run_alone_and_misses_recompute(family):
    name, model, batch, decoder, means, processor = family
    configs = draw_configs(decoder, n=3)
    sampled = {}
    ablator = Ablator(model, decoder)
    for j, cfg in enumerate(configs):
        ablator.apply(cfg.heads, mode=cfg.mode, means=means)
        torch.manual_seed(5)
        with torch.no_grad():
            sampled[j] = model.generate(**batch, do_sample=True, max_new_tokens=4, top_k=0)
    ablator.restore()
    with PackedGenerate(model, decoder, configs, means=means) as pack, torch.no_grad():
        for j in range(len(configs)):
            pack.serve(j)
            torch.manual_seed(5)
            assert torch.equal(model.generate(**batch, do_sample=True, max_new_tokens=4, top_k=0), sampled[j])
        assert pack.stats.solo_calls == len(configs) and pack.stats.packed_calls == 0
    # A call a later pass has not seen before is generated for the configurations still to come.
    other = {k: v[1:] if v.shape[0] == batch["input_ids"].shape[0] else v for k, v in batch.items()}
    if "pixel_values" in other and other["pixel_values"].shape[0] != other["input_ids"].shape[0]:
        other = batch
    want = alone(model, decoder, other, configs, means, max_new_tokens=4)
    with PackedGenerate(model, decoder, configs, means=means) as pack, torch.no_grad():
        pack.serve(1)
        assert torch.equal(greedy(model, other, max_new_tokens=4), want[1])
        pack.serve(2)
        assert torch.equal(greedy(model, other, max_new_tokens=4), want[2])
        assert pack.stats.packed_calls == 1 and pack.stats.replayed == 1 and pack.stats.rows[0] == 2 * (
            other["input_ids"].shape[0])


def test_alone_length_and_fingerprint():
    new = torch.tensor([[5, 9, 2, 2], [5, 5, 5, 5]])
    assert alone_length(new, [9]) == 4  # row 1 never ends: the batch runs to the limit
    assert alone_length(new[:1], [9]) == 2 and alone_length(new[:1], [2, 9]) == 2 and alone_length(new, []) == 4
    a = {"input_ids": torch.tensor([[1, 2]]), "pixel_values": torch.zeros(2, 3), "max_new_tokens": 4}
    b = dict(a, pixel_values=torch.zeros(2, 3).index_fill_(1, torch.tensor([1]), 1e-7))
    assert fingerprint((), a) == fingerprint((), dict(a)) != fingerprint((), b)
    assert fingerprint((), a) != fingerprint((), dict(a, max_new_tokens=5))
    assert fingerprint((), a) != fingerprint((), dict(a, pixel_values=torch.zeros(3, 2)))


def test_packing_refuses_what_it_cannot_do(family):
    name, model, batch, decoder, means, processor = family
    first = decoder.geometry.attention_layers[0]  # 0 but in a hybrid decoder (Qwen3.5: 1)
    assert packing_unsupported(model) is None
    assert "no transformers generate" in packing_unsupported(torch.nn.Linear(2, 2))
    with pytest.raises(VRHError, match="mode 'half'"):
        RowAblator(decoder, [RowConfig((HeadRef(first, 0),), "half")])
    with pytest.raises(VRHError, match="needs per-head mean"):
        RowAblator(decoder, [RowConfig((HeadRef(first, 0),), "mean")])
    rows = RowAblator(decoder, [RowConfig(()), RowConfig((HeadRef(first, 0),))])
    with rows, pytest.raises(VRHError, match="got 3 rows"):
        rows.set_rows([0, 1])
        with torch.no_grad():
            model(**batch)
