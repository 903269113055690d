"""Decoders whose layers differ: hybrid ones (Qwen3.5 dense and MoE: Gated-DeltaNet layers without heads between
gated full-attention layers) and per-layer head widths (Gemma 4: its global layers have wider heads).

Tiny random checkpoints of the real classes (the generic shrinker, vrh_lmms.model.tiny.generic), the Qwen3.5 ones
with attention in layers 1 and 3 so that a head's index is its decoder layer's, not its rank among attention layers.
The reference shares no code with vrh_lmms.model.ablation: it reaches each projection by its module path, takes the
head width from the projection's own input width / the config's head count, and writes the ablated heads' input
columns with a forward pre-hook.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.draws import random_heads
from vrh_lmms.base.heads.geometry import Geometry, HeadRef
from vrh_lmms.base.heads.heads_file import HeadsFile, load_heads_file, save_heads_file
from vrh_lmms.base.heads.spec import resolve_spec
from vrh_lmms.model.ablation import Ablator, HeadMeanCollector, RowAblator, RowConfig, means_shape
from vrh_lmms.model.backbone import dead_heads, survey_decoder
from vrh_lmms.model.capture.attention import CapturePlan, attention_edits, capture_attention
from vrh_lmms.model.generic import model_class_for, survey, text_config
from vrh_lmms.model.tiny.common import seeded
from vrh_lmms.model.tiny.generic import tiny_config
from vrh_lmms.runs.discovery.scoring import rank

HYBRID = {"qwen3_5": (1, 3), "qwen3_5_moe": (1, 3)}
TYPES = [*HYBRID, "gemma4"]
IDS = torch.tensor([[5, 17, 33, 48, 61, 77, 90, 104, 118, 131, 149, 160]])


@functools.lru_cache(maxsize=None)
def tiny(model_type: str):
    config = tiny_config(model_type)
    if model_type in HYBRID:  # attention in layers 1 and 3, linear attention in 0 and 2
        text_config(config).layer_types = ["linear_attention", "full_attention"] * 2
    with seeded(0):
        model = model_class_for(config)._from_config(config, dtype=torch.float32)
    return model.eval()


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=IDS, use_cache=False).logits


def _heads(model_type: str) -> list[HeadRef]:
    if model_type in HYBRID:
        return [HeadRef(1, 2), HeadRef(3, 0), HeadRef(3, 3)]
    return [HeadRef(0, 1), HeadRef(5, 0), HeadRef(5, 3)]  # a sliding layer (width 16) and the global one (512)


def _reference(model, found, heads, fill=None) -> torch.Tensor:
    """Logits with each head's o_proj input columns zeroed (or set to fill[layer, head, :width]) by a pre-hook."""
    n_heads = text_config(model.config).num_attention_heads
    handles = []
    for layer in sorted({h.layer for h in heads}):
        proj = model.get_submodule(f"{found.layers_path}.{layer}.self_attn.o_proj")
        width = proj.weight.shape[1] // n_heads
        chosen = [h.head for h in heads if h.layer == layer]

        def pre(_module, args, chosen=chosen, width=width, layer=layer):
            x = args[0].clone()
            for h in chosen:
                x[..., h * width:(h + 1) * width] = 0 if fill is None else fill[layer, h, :width]
            return (x, *args[1:])

        handles.append(proj.register_forward_pre_hook(pre))
    try:
        return _logits(model)
    finally:
        for handle in handles:
            handle.remove()


@pytest.mark.parametrize("model_type", list(HYBRID))
def test_hybrid_geometry_keeps_real_layer_indices(model_type, tmp_path):
    model = tiny(model_type)
    found = survey(model)
    assert found.ok, found.refusal
    g = found.geometry
    assert (g.layers, g.heads, g.head_layers, g.attention_layers) == (4, 4, (1, 3), (1, 3))
    dec = survey_decoder(found)
    assert dec.attns[0] is None and dec.out_projs[2] is None
    assert dec.out_projs[3] is model.get_submodule(f"{found.layers_path}.3.self_attn.o_proj")
    assert g.all_heads() == [HeadRef(1, h) for h in range(4)] + [HeadRef(3, h) for h in range(4)]
    # config.json alone gives the loaded model's geometry (what preflight checks heads against)
    from vrh_lmms.base.families import get_family
    from vrh_lmms.harness.preload import config_geometry, load_config

    model.config.save_pretrained(tmp_path)
    assert config_geometry(load_config(str(tmp_path)), get_family("qwen3_vl")) == g
    assert dead_heads(dec) == ()
    saved = dec.out_projs[3].weight.detach().clone()
    with torch.no_grad():
        dec.out_projs[3].weight[:, 16:32] = 0  # L3H1 writes nothing
    try:
        assert dead_heads(dec) == (HeadRef(3, 1),)
    finally:
        with torch.no_grad():
            dec.out_projs[3].weight.copy_(saved)


def test_gemma4_geometry_has_per_layer_head_widths(tmp_path):
    model = tiny("gemma4")
    g = survey(model).geometry
    assert g.head_layers is None and g.layer_head_dims == (16, 16, 16, 16, 16, 512)
    assert (g.dim(0), g.dim(5), g.max_head_dim) == (16, 512, 512)
    assert means_shape(g) == (6, 4, 512)
    from vrh_lmms.base.families import get_family
    from vrh_lmms.harness.preload import config_geometry, load_config

    model.config.save_pretrained(tmp_path)
    assert config_geometry(load_config(str(tmp_path)), get_family("gemma3")) == g


@pytest.mark.exact
@pytest.mark.parametrize("model_type", TYPES)
def test_ablation_equals_an_independent_pre_hook_reference(model_type):
    model = tiny(model_type)
    found = survey(model)
    dec = survey_decoder(found)
    heads = _heads(model_type)
    base = _logits(model)
    reference = _reference(model, found, heads)
    assert not torch.equal(reference, base)
    for method in ("fold", "hook"):
        ablator = Ablator(model, dec, method=method)
        ablator.apply(heads)
        try:
            assert torch.equal(_logits(model), reference), method
        finally:
            ablator.restore()
        assert torch.equal(_logits(model), base), f"{method}: restore gives back the intact model"
    # one packed forward, each configuration alone (solo): the same logits
    packed = RowAblator(dec, [RowConfig(()), RowConfig(tuple(heads))], method="hook")
    with packed:
        packed.solo(1)
        assert torch.equal(_logits(model), reference)
        packed.solo(0)
        assert torch.equal(_logits(model), base)
    # capture's attention function reaches the same heads (attention-output space)
    by_layer: dict[int, list[int]] = {}
    for h in heads:
        by_layer.setdefault(h.layer, []).append(h.head)

    class Zero:
        def __init__(self, hs):
            self.hs = hs

        def edit_output(self, layer, module, query, key, value, attention_mask, kwargs, base, output):
            output = output.clone()
            output[:, :, self.hs, :] = 0
            return output

    with attention_edits(model, {layer: Zero(hs) for layer, hs in by_layer.items()}):
        torch.testing.assert_close(_logits(model), reference, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model_type", TYPES)
def test_mean_ablation_of_padded_means_equals_the_reference(model_type):
    model = tiny(model_type)
    found = survey(model)
    dec = survey_decoder(found)
    g = dec.geometry
    with HeadMeanCollector(model, dec) as collector:
        _logits(model)
    means = collector.means()
    assert tuple(means.shape) == means_shape(g)
    for layer in range(g.layers):  # zeros where a layer has no heads, or past a narrower layer's width
        if not g.has_heads(layer):
            assert not means[layer].any()
        else:
            assert means[layer, :, :g.dim(layer)].abs().sum() > 0 and not means[layer, :, g.dim(layer):].any()
    heads = _heads(model_type)
    reference = _reference(model, found, heads, fill=means)
    for method in ("fold", "hook"):
        ablator = Ablator(model, dec, method=method)
        ablator.apply(heads, mode="mean", means=means)
        try:
            torch.testing.assert_close(_logits(model), reference, rtol=1e-5, atol=1e-5)
        finally:
            ablator.restore()
    with pytest.raises(VRHError, match="means have shape"):
        Ablator(model, dec).apply(heads, mode="mean", means=means[:, :, :8])


@pytest.mark.parametrize("model_type", list(HYBRID))
def test_heads_in_a_linear_attention_layer_are_refused_in_one_line(model_type):
    dec = survey_decoder(survey(tiny(model_type)))
    with pytest.raises(VRHError) as err:
        Ablator(tiny(model_type), dec).apply([HeadRef(3, 0), HeadRef(2, 1)])
    line = str(err.value)
    assert "\n" not in line and "L2H1" in line and "heads exist in L1, L3" in line
    with pytest.raises(VRHError, match="heads exist in L1, L3"):
        resolve_spec("L0H0", dec.geometry)
    with pytest.raises(VRHError, match="no attention heads"):
        dec.parse_site("layers.2.head_out")


def test_capture_measures_attention_layers_only_and_ranks_never_name_the_others():
    model = tiny("qwen3_5")
    g = survey(model).geometry
    seq = IDS.shape[1]
    plan = CapturePlan(query_positions=torch.tensor([[seq - 2, seq - 1]]),
                       key_sets={"early": (torch.arange(seq) < 4).view(1, -1)}, argmax=True)
    with torch.no_grad(), capture_attention(model, plan) as handle:
        model(input_ids=IDS, use_cache=False)
    mass = handle.result().mass["early"][0]  # (layers, heads, Q)
    assert torch.isnan(mass[[0, 2]]).all() and torch.isfinite(mass[[1, 3]]).all() and (mass[[1, 3]] > 0).all()
    scores = mass.mean(-1).numpy()
    order = rank(scores, g)
    assert {layer for layer, _ in order} == {1, 3} and len(order) == 8


def test_random_draws_come_from_attention_layers_only_and_uniform_draws_are_unchanged():
    hybrid = Geometry(layers=8, heads=4, kv_heads=2, head_dim=16, head_layers=(3, 7))
    for seed in range(20):
        drawn = random_heads(hybrid, 5, seed)
        assert {h.layer for h in drawn} <= {3, 7} and len(set(drawn)) == 5
    assert sorted(random_heads(hybrid, 8, 0)) == hybrid.all_heads()
    assert {h.layer for h in resolve_spec("random6", hybrid, seed=3).heads} <= {3, 7}
    # a uniform decoder: index i is L(i // heads)H(i % heads), the draw it always was
    uniform = Geometry(layers=6, heads=4, kv_heads=2, head_dim=16)
    rng = np.random.default_rng(11)
    flat = rng.choice(np.arange(24), size=7, replace=False)
    assert random_heads(uniform, 7, 11) == sorted(HeadRef(int(i) // 4, int(i) % 4) for i in flat)


def test_heads_files_of_hybrid_and_uniform_decoders_read_back(tmp_path):
    hybrid = Geometry(layers=4, heads=2, kv_heads=1, head_dim=16, head_layers=(1, 3))
    scores = np.zeros((4, 2))
    scores[1] = [0.5, 0.2]
    scores[3] = [0.9, 0.1]
    ranking = [HeadRef(*x) for x in rank(np.where([[0], [1], [0], [1]], scores, np.nan), hybrid)]
    assert ranking == [HeadRef(3, 0), HeadRef(1, 0), HeadRef(1, 1), HeadRef(3, 1)]
    path = save_heads_file(HeadsFile(model={"id": "tiny"}, geometry=hybrid, scores=scores, ranking=ranking),
                           tmp_path / "h.json")
    back = load_heads_file(path)
    assert back.geometry == hybrid and back.ranking == ranking
    data = json.loads(path.read_text())
    assert data["geometry"]["head_layers"] == [1, 3]
    data["ranking"].append("L2H0")
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(VRHError, match="layer without attention heads.*heads exist in L1, L3"):
        load_heads_file(tmp_path / "bad.json")
    uniform = Geometry(layers=2, heads=2, kv_heads=1, head_dim=16)
    assert uniform.to_dict() == {"layers": 2, "heads": 2, "kv_heads": 1, "head_dim": 16}


@pytest.mark.exact
@pytest.mark.parametrize("model_type", ["qwen3_5", "gemma4"])
def test_patching_writes_each_layers_own_width_from_another_run(model_type):
    from vrh_lmms.model.interventions.patching import patched_logits, record, teacher_forced

    model = tiny(model_type)
    found = survey(model)
    dec = survey_decoder(found)
    g = dec.geometry
    answer = torch.tensor([200, 201, 202])
    clean = teacher_forced({"input_ids": IDS, "attention_mask": torch.ones_like(IDS)}, answer)
    other = IDS.flip(-1)
    corrupt = teacher_forced({"input_ids": other, "attention_mask": torch.ones_like(other)}, answer)
    source = record(model, dec, clean)
    assert tuple(source.values.shape) == (g.layers, 3, g.heads * g.max_head_dim)
    heads = _heads(model_type)
    got = patched_logits(model, dec, corrupt, heads, source.values)
    # reference: the clean run's o_proj inputs recorded by pre-hooks on the module paths, written into the corrupt
    # run's answer rows for the patched heads' columns
    n_heads = text_config(model.config).num_attention_heads
    rows = clean.rows
    seen, handles = {}, []
    layers = sorted({h.layer for h in heads})
    projs = {la: model.get_submodule(f"{found.layers_path}.{la}.self_attn.o_proj") for la in layers}
    for la, proj in projs.items():
        handles.append(proj.register_forward_pre_hook(
            lambda _m, args, la=la: seen.__setitem__(la, args[0][0, rows].clone())))
    with torch.no_grad():
        model(**clean.batch(model, 1), use_cache=False)
    for handle in handles:
        handle.remove()
    handles = []
    for la, proj in projs.items():
        width = proj.weight.shape[1] // n_heads

        def pre(_m, args, la=la, width=width):
            x = args[0].clone()
            for h in [h.head for h in heads if h.layer == la]:
                x[0, rows, h * width:(h + 1) * width] = seen[la][:, h * width:(h + 1) * width]
            return (x, *args[1:])

        handles.append(proj.register_forward_pre_hook(pre))
    try:
        with torch.no_grad():
            reference = model(**corrupt.batch(model, 1), use_cache=False).logits
    finally:
        for handle in handles:
            handle.remove()
    assert torch.equal(got, reference)
    with torch.no_grad():
        plain = model(**corrupt.batch(model, 1), use_cache=False).logits
    assert not torch.equal(got, plain)


def test_kv_policy_refuses_decoders_whose_layers_differ_in_one_line():
    from vrh_lmms.model.kvcache.apply import KVCompression
    from vrh_lmms.model.kvcache.policy import check_kv_geometry, no_policy

    uniform = Geometry(layers=2, heads=4, kv_heads=2, head_dim=16)
    assert check_kv_geometry(uniform) is uniform
    with pytest.raises(VRHError) as err:
        check_kv_geometry(Geometry(layers=8, heads=4, kv_heads=2, head_dim=16, head_layers=(3, 7)))
    assert "\n" not in str(err.value) and "attention layers L3, L7" in str(err.value)
    with pytest.raises(VRHError, match=r"2 x 16, 2 x 512 \(KV heads x head_dim\)"):
        check_kv_geometry(survey(tiny("gemma4")).geometry)
    model = tiny("qwen3_5")
    with pytest.raises(VRHError, match="hybrid decoder caches keys only in its attention layers L1, L3"):
        KVCompression(model, no_policy(uniform))


def test_geometry_describe_names_the_layers_that_differ():
    assert Geometry(28, 28, 4, 128).describe() == "28 layers x 28 heads (kv 4, head_dim 128)"
    assert survey(tiny("qwen3_5")).geometry.describe() == "4 layers (heads in 2: L1, L3) x 4 heads (kv 2, head_dim 16)"
    assert survey(tiny("gemma4")).geometry.describe() == "6 layers x 4 heads (kv 2, head_dim 16; head_dim 512 in L5)"


def test_comparing_heads_files_of_a_hybrid_decoder_counts_its_heads_only(tmp_path):
    from vrh_lmms.report.head_compare import compare_pair, from_heads_file

    g = Geometry(layers=4, heads=4, kv_heads=2, head_dim=16, head_layers=(1, 3))
    rng = np.random.default_rng(0)
    items = []
    for i in range(2):
        scores = np.zeros((4, 4))
        scores[[1, 3]] = rng.random((2, 4))
        ranking = [HeadRef(*x) for x in rank(np.where(scores > 0, scores, np.nan), g)]
        path = save_heads_file(HeadsFile(model={"id": f"m{i}"}, geometry=g, scores=scores, ranking=ranking),
                               tmp_path / f"h{i}.json")
        items.append(from_heads_file(load_heads_file(path), str(path)))
    out = compare_pair(items[0], items[1], 2)
    assert out["population"] == 8  # the heads of L1 and L3, not 4 x 4 cells
    live = np.zeros((4, 4), dtype=bool)
    live[[1, 3]] = True
    from scipy.stats import spearmanr

    a, b = (np.asarray(i.scores)[live] for i in items)
    assert out["spearman"] == pytest.approx(spearmanr(a, b).statistic)


@pytest.fixture(scope="module", params=list(HYBRID))
def hybrid_checkpoint(request, tmp_path_factory):
    """A saved tiny Qwen3.5 (dense or MoE) with a processor: the generic tiny config (attention in L1 and L3), the
    tokenizer and processor of the tiny Qwen3-VL (Qwen3.5 reads images as Qwen3-VL does)."""
    from vrh_lmms.model.tiny.qwen3_vl import make_processor, make_tokenizer

    tok = make_tokenizer()
    config = tiny_config(request.param)
    text = text_config(config)
    text.layer_types = ["linear_attention", "full_attention"] * 2
    text.vocab_size = len(tok)
    ids = tok.convert_tokens_to_ids
    config.image_token_id, config.video_token_id = ids("<|image_pad|>"), ids("<|video_pad|>")
    config.vision_start_token_id, config.vision_end_token_id = ids("<|vision_start|>"), ids("<|vision_end|>")
    text.eos_token_id = text.pad_token_id = ids("<|im_end|>")
    with seeded(0):
        model = model_class_for(config)._from_config(config, dtype=torch.float32)
    out = tmp_path_factory.mktemp(f"tiny_{request.param}")
    model.save_pretrained(out)
    make_processor(tok).save_pretrained(out)
    return request.param, out


def test_vrh_hf_ablates_a_hybrid_checkpoint_exactly_and_names_real_layers(hybrid_checkpoint):
    """Through lmms-eval's `huggingface` backend (vrh_hf): the heads of L1 and L3 are found, heads=L1H2;L3H0 gives
    the logits of an independent pre-hook reference on the same loaded model, and the run records the real names."""
    from vrh_lmms.base.heads.spec import resolve_spec
    from vrh_lmms.harness.lmms import build_model

    model_type, path = hybrid_checkpoint
    lm = build_model("vrh_hf", f"pretrained={path},dtype=float32,heads=L1H2;L3H0")
    g = lm.vrh_decoder.geometry
    assert type(lm.model).__name__ == model_class_for(lm.model.config).__name__
    assert g.head_layers == (1, 3) and lm.vrh_record()["ablation"]["heads"] == ["L1H2", "L3H0"]
    assert lm.vrh_record()["geometry"]["head_layers"] == [1, 3]
    with torch.no_grad():
        ours = lm.model(input_ids=IDS).logits
        lm.vrh_apply(resolve_spec(None, g))
        intact = lm.model(input_ids=IDS).logits
    found = survey(lm.model)
    assert found.layers_path and found.geometry == g
    handles = []
    for layer, head in ((1, 2), (3, 0)):
        proj = lm.model.get_submodule(f"{found.layers_path}.{layer}.self_attn.o_proj")
        width = proj.weight.shape[1] // 4

        def pre(_m, args, head=head, width=width):
            x = args[0].clone()
            x[..., head * width:(head + 1) * width] = 0
            return (x, *args[1:])

        handles.append(proj.register_forward_pre_hook(pre))
    try:
        with torch.no_grad():
            reference = lm.model(input_ids=IDS).logits
    finally:
        for handle in handles:
            handle.remove()
    assert torch.equal(ours, reference) and not torch.equal(ours, intact)
    with pytest.raises(VRHError, match=r"heads=L2H0: head L2H0 is in a layer without attention heads"):
        build_model("vrh_hf", f"pretrained={path},dtype=float32,heads=L2H0")


@pytest.mark.slow
def test_packed_sweep_on_a_hybrid_checkpoint_writes_the_unpacked_files(hybrid_checkpoint, vrh_env, tmp_path):
    """A sweep through vrh_hf on a hybrid decoder, packed three configurations to a generate call (its prefill runs
    whole: a hybrid is never shared), writes what one configuration at a time writes; its draws name L1 and L3."""
    from support.packed_sweeps import unpacked_and_packed

    from vrh_lmms.base.heads.plan import plan_configurations
    from vrh_lmms.harness.lmms import build_model

    _, path = hybrid_checkpoint
    task = "vrh_synth_grounding"
    vrh_env.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 3, "seed": 3}))
    model_args = f"pretrained={path},dtype=float32"
    lm = build_model("vrh_hf", model_args)
    assert lm.vrh_pack_unsupported() is None
    g = lm.vrh_decoder.geometry
    scores = np.zeros((g.layers, g.heads))
    scores[[1, 3]] = np.random.default_rng(2).random((2, g.heads))
    ranking = [HeadRef(*x) for x in rank(np.where(scores > 0, scores, np.nan), g)]
    heads = save_heads_file(HeadsFile({"id": str(path), "family": "hf"}, g, scores, ranking), tmp_path / "h.json")
    configs = [c for c in plan_configurations([2], 1, False, ["zero"]) if c.id in ("baseline", "top2", "random2_s0")]

    one, packed, packs = unpacked_and_packed(lm, "vrh_hf", model_args, task, heads, configs, tmp_path, limit=3,
                                             max_new_tokens=6)
    assert packs == 1, "three configurations in one pack"
    assert sorted(one) == sorted(packed) == sorted(c.id for c in configs)
    for cid in one:
        assert one[cid] == packed[cid], cid
    drawn = [name for cid in one for name in one[cid][1]]
    assert drawn and {int(name[1:].split("H")[0]) for name in drawn} <= {1, 3}


def test_preflight_geometry_of_vrh_hf_comes_from_config_json_alone(tmp_path):
    """What commands check heads files and head sets against before any load: vrh_hf's geometry from config.json
    on the meta device (the hybrid layout of the published Qwen3.5), or its refusal in one line."""
    from transformers import AutoConfig

    from vrh_lmms.harness.preload import ModelPlan, plan_geometry

    AutoConfig.for_model("qwen3_5").save_pretrained(tmp_path / "qwen3_5")
    plan = plan_geometry(ModelPlan("vrh_hf", {"pretrained": str(tmp_path / "qwen3_5")}))
    assert plan.geometry.head_layers == tuple(range(3, 32, 4)) and plan.geometry.layers == 32
    AutoConfig.for_model("mllama").save_pretrained(tmp_path / "mllama")
    with pytest.raises(VRHError) as err:
        plan_geometry(ModelPlan("vrh_hf", {"pretrained": str(tmp_path / "mllama")}))
    assert "\n" not in str(err.value) and "its heads cannot be cut: its image is read through cross-attention" \
        in str(err.value)
