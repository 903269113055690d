"""Discovery end to end through lmms-eval on a tiny Qwen2.5-VL: a planted retrieval head ranks first, every cell is
written, the heads file agrees with the stored per-sample statistics, and a killed run resumes to the same result."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from vrh_lmms.base.heads.geometry import HeadRef
from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.runs.discovery.efficiency import sample_efficiency
from vrh_lmms.runs.discovery.run import DiscoverySpec, run_discovery, sidecars
from vrh_lmms.runs.discovery.scoring import all_cells, cell_scores

torch.set_num_threads(1)
PIXELS = 224 * 224  # the synthetic scenes' size: no up-scaling, 8 x 8 image tokens
PLANTED = HeadRef(0, 3)
N_DOCS = 6


SCENE = {"min_objects": 1, "max_objects": 1, "colours": ["white"], "shapes": ["square"], "min_size": 56,
         "max_size": 96}


def _backend_like_batch(processor, scene, answer_len: int, rng: np.random.Generator):
    """What the qwen2_5_vl backend feeds the model (system prompt, JPEG q85 image, task prompt) + answer tokens."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    scene.image.save(buf, format="JPEG", quality=85)
    image = Image.open(buf).convert("RGB")
    prompt = f"Locate {scene.expression} in the image and output its bbox coordinates in JSON format."
    msgs = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": prompt}]}]
    text = processor.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    batch = processor(text=[text], images=[image], return_tensors="pt")
    answer = torch.from_numpy(rng.integers(20, len(processor.tokenizer), size=(1, answer_len)))
    batch["input_ids"] = torch.cat([batch["input_ids"], answer], 1)
    batch["attention_mask"] = torch.ones_like(batch["input_ids"])
    batch["mm_token_type_ids"] = torch.cat([batch["mm_token_type_ids"], torch.zeros_like(answer)], 1)
    return batch


def _calibration_direction(model, processor, n: int = 32) -> torch.Tensor:
    """A direction (+ bias) in layer 0's normalised input: ~1 on the referent's image tokens, ~0 on every other
    token of a backend-like sequence (image, prompt and answer tokens alike)."""
    from vrh_lmms.base.synth.scenes import SceneConfig, generate_scene
    from vrh_lmms.model.capture.extras import layout_extras
    from vrh_lmms.model.capture.layouts import box_key_mask, image_token_map

    layer0 = model.model.language_model.layers[0].self_attn
    feats, labels = [], []
    grab = {}
    handle = layer0.k_proj.register_forward_pre_hook(lambda m, a: grab.__setitem__("x", a[0].detach()))
    cfg = SceneConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in SCENE.items()})
    rng = np.random.default_rng(0)
    for i in range(n):
        scene = generate_scene(1000 + i, seed=5, cfg=cfg)
        batch = _backend_like_batch(processor, scene, answer_len=10, rng=rng)
        with torch.no_grad():
            model(**batch)
        x, y, w, h = scene.target_object.bbox
        tmap = image_token_map("qwen2_5_vl", batch["input_ids"][0], scene.image.size,
                               layout_extras("qwen2_5_vl", processor, batch, 0))
        seq = batch["input_ids"].shape[1]
        label = box_key_mask(tmap, (x, y, x + w, y + h), seq).float()
        # Tokens that overlap the square without being box tokens are ambiguous: leave them out of the fit.
        c = tmap.cells
        touch = (torch.minimum(c[:, 2], torch.tensor(x + w)) > torch.maximum(c[:, 0], torch.tensor(x))) & \
                (torch.minimum(c[:, 3], torch.tensor(y + h)) > torch.maximum(c[:, 1], torch.tensor(y)))
        keep = torch.ones(seq, dtype=torch.bool)
        keep[tmap.positions[touch]] = False
        keep |= label.bool()
        feats.append(grab["x"][0][keep])
        labels.append(label[keep])
    handle.remove()
    X = torch.cat(feats).double()
    Y = torch.cat(labels).double()
    X1 = torch.cat([X, torch.ones(len(X), 1, dtype=X.dtype)], 1)
    w = torch.linalg.solve(X1.T @ X1 + 1e-3 * torch.eye(X1.shape[1], dtype=X.dtype), X1.T @ Y)
    pred = X1 @ w
    assert pred[Y > 0].mean() - pred[Y == 0].mean() > 0.6, "calibration cannot separate box tokens"
    return w.float()


def plant_retrieval_head(model, processor, head: HeadRef, strength: float = 60.0) -> None:
    """Wire `head` so that every query attends to the referent's image tokens (content-based, via its key).

    The query is a constant (bias only) on the lowest-frequency rotary pair, so rotary positions barely change the
    score; the key of the head's kv group on that pair is the calibrated box-token detector.
    """
    w = _calibration_direction(model, processor)
    attn = model.model.language_model.layers[head.layer].self_attn
    cfg = model.config.text_config
    d = cfg.head_dim
    group = head.head // (cfg.num_attention_heads // cfg.num_key_value_heads)
    dim = d // 2 - 1  # lowest rotary frequency; rotate_half pairs it with dim + d/2
    with torch.no_grad():
        qs = slice(head.head * d, (head.head + 1) * d)
        attn.q_proj.weight[qs] = 0
        attn.q_proj.bias[qs] = 0
        attn.q_proj.bias[head.head * d + dim] = 1.0
        row = group * d + dim
        attn.k_proj.weight[row] = strength * w[:-1] / attn.scaling
        attn.k_proj.bias[row] = strength * (w[-1] - 0.5) / attn.scaling


@pytest.fixture(scope="module")
def planted_checkpoint(tmp_path_factory):
    from vrh_lmms.model.tiny.inputs import load_tiny
    from vrh_lmms.model.tiny.qwen2_5_vl import build

    path = build(tmp_path_factory.mktemp("planted"), seed=0,
                 processor_kwargs={"min_pixels": PIXELS, "max_pixels": PIXELS})
    model, processor = load_tiny(path)
    plant_retrieval_head(model, processor, PLANTED)
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def synth_env(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("VRH_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    mp.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": N_DOCS, "seed": 3, "scene": SCENE}))
    yield
    mp.undo()


@pytest.fixture(scope="module")
def lm(planted_checkpoint, synth_env):
    from vrh_lmms.harness import lmms

    return lmms.build_model("vrh_qwen25", f"pretrained={planted_checkpoint},dtype=float32,min_pixels={PIXELS},"
                                          f"max_pixels={PIXELS}")


def spec_for(output, planted_checkpoint) -> DiscoverySpec:
    return DiscoverySpec(model="vrh_qwen25", model_args=f"pretrained={planted_checkpoint}",
                         tasks=["vrh_synth_grounding"], output=str(output), limit=N_DOCS,
                         gen_kwargs="max_new_tokens=10")


@pytest.fixture(scope="module")
def discovered(lm, planted_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("disc") / "heads.json"
    run_discovery(spec_for(out, planted_checkpoint), lm=lm)
    return out


def test_planted_head_ranks_first(discovered):
    hf = load_heads_file(discovered)
    assert hf.ranking[0] == PLANTED
    for cell in ("in,sum,mean", "out,sum,mean", "out,argmax,mean", "in,argmax,mean"):
        assert hf.cell_ranking(cell)[0] == PLANTED, cell
    # The planted head puts most of its attention inside the box; an untouched head does not.
    assert hf.scores[PLANTED.layer, PLANTED.head] > 0.5
    assert np.median(hf.scores) < 0.3


def test_heads_file_records_and_agrees_with_samples(discovered):
    hf = load_heads_file(discovered)
    assert set(hf.cells) == set(all_cells())
    assert hf.scoring["n_samples"] == N_DOCS and hf.scoring["task"] == "vrh_synth_grounding"
    assert hf.baseline["vrh_synth_grounding"]["n"] == N_DOCS
    paths = sidecars(discovered)
    with np.load(paths["samples"]) as data:
        samples = [{k: data[k][i] for k in data.files if k != "keys"} for i in range(len(data["keys"]))]
    for cell in all_cells():
        expect = np.nan_to_num(cell_scores(samples, cell, hf.scoring["freq_top_k"]), nan=0.0)
        np.testing.assert_allclose(np.asarray(hf.cells[cell]["scores"]), expect, atol=1e-6)
    assert paths["means"].is_file() and (paths["eval"] / "results.json").is_file()
    rows, full = sample_efficiency(samples, "out,sum,mean", k=1, ns=(1, 2), resamples=20)
    assert full == {(PLANTED.layer, PLANTED.head)} and rows[0].mean_overlap == 1.0


def test_resume_skips_done_docs_and_reproduces(discovered, lm, planted_checkpoint, tmp_path):
    import shutil

    out = tmp_path / "heads.json"
    shutil.copytree(sidecars(discovered)["parts"], sidecars(out)["parts"])
    parts = sorted(sidecars(out)["parts"].glob("*.npz"))
    parts[-1].unlink()  # as if killed before the last doc finished
    calls = []
    real_generate = type(lm.model).generate

    def counting(self, *a, **k):
        calls.append(1)
        return real_generate(self, *a, **k)

    type(lm.model).generate = counting
    try:
        run_discovery(spec_for(out, planted_checkpoint), lm=lm)
    finally:
        type(lm.model).generate = real_generate
    assert len(calls) == 1  # only the missing doc was generated again
    a, b = json.loads(discovered.read_text()), json.loads(out.read_text())
    for key in ("scores", "ranking", "cells", "baseline"):
        assert a[key] == b[key], key


def test_refuses_to_overwrite_and_finished_parts_of_another_discovery(discovered, planted_checkpoint, lm):
    import shutil

    from vrh_lmms.base.errors import VRHError

    with pytest.raises(VRHError, match="exists"):
        run_discovery(spec_for(discovered, planted_checkpoint))
    other = spec_for(discovered.with_name("other.json"), planted_checkpoint)
    parts = sidecars(other.output)["parts"]
    shutil.copytree(sidecars(discovered)["parts"], parts)
    (parts / "identity.json").write_text(json.dumps({"model": "x"}))  # finished parts of another discovery
    with pytest.raises(VRHError, match="different discovery.*finished part.*--force"):
        run_discovery(other, lm=lm)
    assert len(list(parts.glob("*.npz"))) == N_DOCS  # nothing removed


@pytest.mark.parametrize("with_prompt", [True, False])
def test_interceptor_passes_answers_and_replays_the_same_shape(with_prompt):
    """HF generate returns prompt + answer; remote InternVL returns only the answer. Replay must match either."""
    from vrh_lmms.runs.discovery.interceptor import DocTracker, GenerateInterceptor

    class Fake(torch.nn.Module):
        def generate(self, input_ids=None, attention_mask=None, **kw):
            answer = torch.tensor([[7, 8, 9]])
            return torch.cat([input_ids, answer], 1) if with_prompt else answer

    model = Fake()
    tracker = DocTracker({"t": {"test": [{"x": 1}, {"x": 2}]}})
    seen, store = [], {}

    def on_generated(ctx, tensors, answer, includes_prompt):
        seen.append((ctx.key, answer.tolist(), includes_prompt))
        store[ctx.key] = (answer, includes_prompt)

    icp = GenerateInterceptor(model, tracker, on_generated, lambda ctx: store.get(ctx.key))
    assert tracker["t"]["test"][1] == {"x": 2}
    ids = torch.tensor([[1, 2, 3, 4]])
    first = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids))
    replay = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids))
    assert seen == [("t__test__1", [7, 8, 9], with_prompt)]  # the replay did not call the model again
    assert torch.equal(first, replay)
    icp.uninstall()
    assert "generate" not in model.__dict__
