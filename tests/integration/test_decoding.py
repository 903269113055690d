"""Static-cache decoding of packed generate (vrh_lmms.model.decoding): in float32 on CPU, a static cache (no compile)
gives the very tokens of the dynamic cache, on the tiny Qwen2.5-VL and the shipped demo model, with packed rows of
different head sets (zero and mean ablation) active; a family that cannot falls back with one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_packing import draw_configs, scenes_batch
from test_sweep_packing import TASK, sweep_files

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
from vrh_lmms.base.heads.plan import plan_configurations
from vrh_lmms.harness import lmms
from vrh_lmms.model.backbone import locate_decoder
from vrh_lmms.model.decoding import Decoding, check_decode, resolve
from vrh_lmms.model.packing import PackedGenerate
from vrh_lmms.runs.sweep.run import SweepSpec, run_sweep

torch.set_num_threads(1)


def cache_types(model):
    """A forward pre-hook recording the class of the cache each forward gets (to see which cache really ran)."""
    seen: list[str] = []

    def pre(module, args, kwargs):
        cache = kwargs.get("past_key_values", kwargs.get("cache"))
        seen.append(type(cache).__name__)

    return seen, model.register_forward_pre_hook(pre, with_kwargs=True)


def packed_answers(model, batch, configs, means, decode: str, **gen) -> tuple[list[torch.Tensor], list[str], int]:
    decoder = locate_decoder(model)
    pack = PackedGenerate(model, decoder, configs, means=means, decode=decode)
    seen, handle = cache_types(model)
    outs = []
    try:
        with pack, torch.no_grad():
            for j in range(len(configs)):
                pack.serve(j)
                outs.append(model.generate(**batch, do_sample=False, num_beams=1, **gen))
    finally:
        handle.remove()
    return outs, seen, pack.stats.packed_calls


def _means(model):
    g = locate_decoder(model).geometry
    return torch.randn(g.layers, g.heads, g.head_dim, generator=torch.Generator().manual_seed(0))


def _check_static_equals_dynamic(model, batch, configs, means, **gen):
    dynamic, seen_d, packed_d = packed_answers(model, batch, configs, means, "dynamic", **gen)
    static, seen_s, packed_s = packed_answers(model, batch, configs, means, "static", **gen)
    assert packed_d == packed_s == 1, "one packed run answers every configuration"
    assert "StaticCache" in seen_s and "StaticCache" not in seen_d, (seen_s, seen_d)
    for j, (a, b) in enumerate(zip(dynamic, static)):
        assert torch.equal(a, b), f"configuration {j}: static-cache tokens differ from the dynamic cache's"
    assert any(not torch.equal(dynamic[0], d) for d in dynamic[1:]), "the head sets change some answer"


def test_static_equals_dynamic_tiny_qwen(tiny_checkpoints):
    from vrh_lmms.model.tiny.inputs import load_tiny

    model, processor = load_tiny(tiny_checkpoints("qwen2_5_vl"))
    batch = scenes_batch(processor)
    configs = draw_configs(locate_decoder(model))
    _check_static_equals_dynamic(model, batch, configs, _means(model), max_new_tokens=12)


def test_static_equals_dynamic_demo_model():
    from research.demo_model.train import load_demo_model
    from vrh_lmms.pipelines.demo.pipeline import demo_model_path

    model, processor, _ = load_demo_model(demo_model_path())
    batch = scenes_batch(processor, n=4)
    configs = draw_configs(locate_decoder(model), n=6, seed=1)
    _check_static_equals_dynamic(model, batch, configs, _means(model), max_new_tokens=16)


def test_modes_and_fallback(tiny_checkpoints, capsys):
    from vrh_lmms.model.tiny.inputs import load_tiny

    assert check_decode(None) == "auto"
    with pytest.raises(VRHError, match="decode='fast' unknown"):
        check_decode("fast")
    model, _ = load_tiny(tiny_checkpoints("qwen2_5_vl"))
    assert resolve("auto", model) == ("dynamic", None)  # CPU: auto keeps the dynamic cache
    assert resolve("static", model) == ("static", None)
    assert Decoding(model, "static").kwargs({"max_new_tokens": 3})["cache_implementation"] == "static"
    assert "cache_implementation" not in Decoding(model, "dynamic").kwargs({"max_new_tokens": 3})
    model._can_compile_fullgraph = False  # instance attribute: a family whose forward is not compilable
    try:
        dec = Decoding(model, "static")
        dec.fall_back("again")  # said once only
    finally:
        del model._can_compile_fullgraph
    assert dec.cache == "dynamic" and "cache_implementation" not in dec.kwargs({})
    err = capsys.readouterr().err
    assert err.count("decode=static") == 1 and "does not declare a compilable forward" in err


@pytest.mark.parametrize("method", ["fold", "hook"])
def test_packed_row_ablation_compiles_as_one_graph(tiny_checkpoints, method):
    """The per-row head masks stay compatible with compiled decode steps (transformers compiles the forward for
    CUDA graphs): the language model with packed row ablation traces with fullgraph=True (no graph break, no
    data-dependent Python branch) and gives the eager output; one compiled function serves the packs of a sweep one
    after another (new head sets, new mask tensors) with each pack's own output, and the plain model after them."""
    from vrh_lmms.model.ablation import RowAblator
    from vrh_lmms.model.tiny.inputs import load_tiny

    model, _ = load_tiny(tiny_checkpoints("qwen2_5_vl"))
    decoder = locate_decoder(model)
    lm = model.model.language_model
    embeds = model.get_input_embeddings()(torch.randint(0, 100, (7, 5)))
    torch._dynamo.reset()
    compiled = torch.compile(lambda e: lm(inputs_embeds=e).last_hidden_state, backend="eager", fullgraph=True)
    try:
        with torch.no_grad():
            outputs = []
            for seed in range(3):  # three packs of different head sets, one after the other
                configs = draw_configs(decoder, seed=seed)
                with RowAblator(decoder, configs, means=_means(model), method=method) as rows:
                    rows.set_rows(list(range(len(configs))))
                    eager = lm(inputs_embeds=embeds).last_hidden_state
                    assert torch.equal(compiled(embeds), eager), f"pack {seed}"
                    outputs.append(eager)
            plain = lm(inputs_embeds=embeds).last_hidden_state
            assert torch.equal(compiled(embeds), plain)
        assert not torch.equal(outputs[0], outputs[1]) and not torch.equal(outputs[0], plain)
    finally:
        torch._dynamo.reset()


def test_sweep_through_lmms_eval_with_decode_static(tiny_checkpoints, vrh_env, tmp_path):
    """Model arg decode=static reaches packed generate through the backend; the packed sweep's files equal those of
    decode=dynamic (metrics, vrh block, every sample line), and a bad value is refused before any weight loads."""
    ckpt = tiny_checkpoints("qwen2_5_vl")
    vrh_env.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 4, "seed": 3}))
    pixels = 28 * 28 * 16
    with pytest.raises(VRHError, match="decode='fastest' unknown"):
        lmms.build_model("vrh_qwen25", f"pretrained={ckpt},decode=fastest", batch_size=2)
    used = []
    original = PackedGenerate._decode

    def spy(self, args, kwargs):
        used.append(self.decoding.cache)
        return original(self, args, kwargs)

    vrh_env.setattr(PackedGenerate, "_decode", spy)
    files = {}
    for decode in ("dynamic", "static"):
        model_args = f"pretrained={ckpt},dtype=float32,min_pixels={pixels},max_pixels={pixels},decode={decode}"
        lm = lmms.build_model("vrh_qwen25", model_args, batch_size=2)
        g = lm.vrh_decoder.geometry
        scores = np.random.default_rng(2).random((g.layers, g.heads))
        heads = tmp_path / f"heads_{decode}.json"
        save_heads_file(HeadsFile({"id": str(ckpt), "family": "qwen2_5_vl"}, g, scores, ranking_from_scores(scores)),
                        heads)
        configs = plan_configurations([2], 1, False, ["zero"])
        spec = SweepSpec("vrh_qwen25", model_args, [TASK], str(heads), configs, limit=4, batch_size=2,
                         gen_kwargs="max_new_tokens=10", pack=3)
        files[decode] = sweep_files(run_sweep(spec, tmp_path / decode, lm=lm, progress=False))
    assert "static" in used and "dynamic" in used
    for name, (results, vrh, n, lines) in files["static"].items():
        d_results, d_vrh, d_n, d_lines = files["dynamic"][name]
        assert results == d_results and n == d_n
        same = json.dumps(d_vrh).replace("heads_dynamic", "heads_static").replace("decode=dynamic", "decode=static")
        assert json.dumps(vrh) == same  # the vrh block differs only in the names of the run's own inputs
        assert [line["resps"] for line in lines] == [line["resps"] for line in d_lines]
