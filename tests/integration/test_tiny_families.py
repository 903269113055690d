"""Tiny real-class checkpoints of every family: CLI round trip, generation, image-token layout, vocabulary-bound
config ids, seeded determinism, structural features, and loading + generating through lmms-eval's own backends."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import transformers
from oracles.reference_ablation import reference_ablation
from PIL import Image
from safetensors.torch import load_file
from transformers import AutoProcessor

from vrh_lmms.base.heads.geometry import Geometry
from vrh_lmms.base.synth.scenes import SceneConfig, generate_scene
from vrh_lmms.cli import main
from vrh_lmms.model.backbone import locate_decoder
from vrh_lmms.model.tiny.inputs import as_float32, load_tiny, processor_inputs, render_prompt, scene_messages
from vrh_lmms.model.tiny.registry import TINY_FACTORIES, build_tiny

torch.set_num_threads(1)
ALL = sorted(TINY_FACTORIES)

# Image-token layout per family for a plain image: (placeholder, lengths of the placeholder runs at 112x112 and at
# 224x112 (w x h), token just before the first run, token just after the last; None = the run starts the prompt /
# is followed by prompt text).
LAYOUT = {
    # 28 px cells: 4x4; 8x4.
    "qwen2_5_vl": ("<|image_pad|>", [16], [32], "<|vision_start|>", "<|vision_end|>"),
    # 32 px cells, sides rounded to the nearest multiple of 32: 112 -> 128 gives 4x4; 224x128 gives 7x4.
    "qwen3_vl": ("<|image_pad|>", [16], [28], "<|vision_start|>", "<|vision_end|>"),
    # 28 px cells as Qwen2.5-VL: 4x4; 8x4.
    "glm4v": ("<|image|>", [16], [32], "<|begin_of_image|>", "<|end_of_image|>"),
    # 16 tokens per 112 px tile (8x8 patches pixel-shuffled 2x2); a 2:1 image gets 2 tiles + a thumbnail.
    "internvl": ("<IMG_CONTEXT>", [16], [48], "<img>", "</img>"),
    # base 8x8 + AnyRes grid unpadded to the image with a newline per row: 64 + 8x8 + 8; 64 + 8x16 + 8.
    "llava_next": ("<image>", [136], [200], "<|end_header_id|>", None),
    # always (112 / 14)^2 on the squashed image, at the very start, then <bos>.
    "paligemma": ("<image>", [64], [64], None, "<bos>"),
    # longest side scaled to 224, cut into 112 px tiles of 16 tokens (+ global view), each run framed by
    # <fake_token_around_image> and a <row_i_col_j> / <global-img> tag: 2x2 + 1; 1x2 + 1.
    "idefics3": ("<image>", [16] * 5, [16] * 3, "<row_1_col_1>", "<fake_token_around_image>"),
    # Qwen2.5-VL's image processor and 28 px cells (load_tiny gives the thinker, which has the forward)
    "qwen2_5_omni": ("<|IMAGE|>", [16], [32], "<|vision_bos|>", "<|vision_eos|>"),
    # one fixed 8x8 grid on CLIP's centre crop, after "USER:"
    "llava": ("<image>", [64], [64], ":", "\n"),
    # base 4x4 on 56 px tiles + unpadded AnyRes grid with a newline per row: 16 + 8x8 + 8; 16 + 8x16 + 8
    "llava_onevision": ("<image>", [88], [152], "user", "\n"),
    # the processor's image_token is <start_of_image>; 64 soft tokens follow it
    "gemma3": ("<start_of_image>", [1], [1], "\n", "<image_soft_token>"),
    # Pixtral: one [IMG] per 28 px cell, each row closed by [IMG_BREAK], the last by [IMG_END]: 4 x 4; 4 rows of 8
    "mistral3": ("[IMG]", [4] * 4, [8] * 4, "[INST]", "[IMG_END]"),
    # the processor's image_token is the global view's <|image|> marker, then 16 <|patch|>; a 2:1 image gets 2 tiles
    # (each closed by a separator) before it
    "llama4": ("<|image|>", [1], [1], ("<|image_start|>", "<|tile_y_separator|>"), "<|patch|>"),
}
# the token the image features go to, where the processor's image_token is another one (a marker or framing token)
FEATURE_TOKEN = {"gemma3": "<image_soft_token>", "llama4": "<|patch|>", "molmo2": "<im_patch>"}
# Molmo 2: the global view's 8 rows of 8 `<im_patch>`, then the crops' rows (a 112 px image: 2 x 2 crops of 105 px
# on a 161 px canvas, 23 patches a side pooled to 11; 224 x 112: 2 x 4 crops, 11 rows of 18), each row closed by
# <im_col>, after <low_res_im_start>. Added apart (issue 49) so it merges with the other families' lines.
LAYOUT["molmo2"] = ("<im_patch>", [8] * 8 + [11] * 11, [8] * 8 + [18] * 11, "<low_res_im_start>", "<im_col>")
# MiniCPM-V 4.6 (7 px patches, 28 px merged cells, scale 112): 112 x 112 stays whole, 4 x 4 after <image>; 224 x 112
# is the 3 x 6 source view, then 2 slices of 4 x 4 (each closed by </slice>)
LAYOUT["minicpmv"] = ("<|image_pad|>", [16], [18, 16, 16], "<image>", None)  # then </image> / </slice>
# Qwen3.5: Qwen3-VL's processor and 32 px cells (112 -> 128: 4 x 4; 224 x 128: 7 x 4)
LAYOUT["qwen3_5"] = LAYOUT["qwen3_vl"]
# Gemma 4 (16 px patches pooled 3 x 3, at most 70 soft tokens in the tiny processor): 112 x 112 resized to 384 x 384,
# 8 x 8 tokens; 224 x 112 to 528 x 240, 11 x 5; between <|image> and <image|>
LAYOUT["gemma4"] = ("<|image|>", [64], [55], "<|image>", "<image|>")
# LLaVA-OneVision-1.5: Qwen2-VL's image processor and 28 px cells, one frame per patch (4 x 4; 8 x 4)
LAYOUT["llava_onevision1_5"] = LAYOUT["qwen2_5_vl"]
# Families with an lmms-eval 0.7.3 backend: (model name, extra model args, folder name the backend needs).
BACKENDS = {
    "qwen2_5_vl": ("qwen2_5_vl", "", None),
    "qwen3_vl": ("qwen3_vl", "", None),
    "internvl": ("internvl_hf", "", None),
    "llava_next": ("llava_hf", "", None),
    # glm4v loads the MoE class unless "Flash" is in the path (lmms_eval/models/simple/glm4v.py).
    "glm4v": ("glm4v", "", "GLM-4.1V-Flash-tiny"),
}
# families added with their wrappers, each loaded by name through the lmms-eval backend it wraps
BACKENDS.update({family: (backend, "", None) for family, backend in (
    ("llava", "llava_hf"), ("llava_onevision", "llava_hf"), ("gemma3", "gemma3"), ("mistral3", "mistral3_vl"),
    ("llama4", "llama4_scout"))})
BACKENDS["qwen3_5"] = ("qwen3_5", "", None)
# tiny text geometry where it is not the shared 2-layer GQA one: Qwen3.5's hybrid decoder has heads in its
# full-attention layers 1 and 3 only (0 and 2 are Gated DeltaNet)
# Gemma 4 keeps its published per-layer shape: the global layer's heads twice as wide, sharing one KV head
GEOMETRY = {"qwen3_5": Geometry(layers=4, heads=4, kv_heads=2, head_dim=16, head_layers=(1, 3)),
            "gemma4": Geometry(layers=2, heads=4, kv_heads=2, head_dim=16, layer_head_dims=(16, 32),
                               layer_kv_heads=(2, 1))}
BACKENDS["gemma4"] = ("gemma4", "", None)
TOKEN_ID_KEY = re.compile(r"(token_id|token_ids|token_index)$")


@pytest.fixture(scope="module")
def loaded(tiny_checkpoints):
    cache: dict[str, tuple] = {}

    def get(family: str):
        if family not in cache:
            cache[family] = load_tiny(tiny_checkpoints(family))
        return cache[family]

    return get


def scene_image(size=(112, 112)):
    return generate_scene(0, 0, SceneConfig(image_size=112, min_size=16, max_size=40)).image.resize(size)


def one_prompt(processor, image):
    text = render_prompt(processor, scene_messages("the red circle", image))
    batch = processor(text=[text], images=[image], return_tensors="pt")
    batch.pop("labels", None)
    return as_float32(batch)


def weights(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "model.safetensors"))


@pytest.mark.parametrize("family", ALL)
def test_cli_round_trip_generates_and_is_deterministic(family, tiny_checkpoints, tmp_path):
    out = tmp_path / "ckpt"
    assert main(["make-tiny", family, str(out), "--seed", "0"]) == 0
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (out / name).is_file(), name
    # Same seed as the session checkpoint: byte-identical weights and config.
    reference = Path(tiny_checkpoints(family))
    assert (out / "model.safetensors").read_bytes() == (reference / "model.safetensors").read_bytes()
    assert json.loads((out / "config.json").read_text()) == json.loads((reference / "config.json").read_text())
    # The real class named in config.json loads it, and AutoProcessor the processor.
    arch = json.loads((out / "config.json").read_text())["architectures"][0]
    model = getattr(transformers, arch).from_pretrained(out, dtype=torch.float32).eval()
    model = getattr(model, "thinker", model)  # Qwen2.5-Omni answers text through its thinker (no talker here)
    processor = AutoProcessor.from_pretrained(out)
    batch = one_prompt(processor, scene_image())
    with torch.no_grad():
        gen = model.generate(**batch, max_new_tokens=3, do_sample=False)
    assert gen.shape[1] > batch["input_ids"].shape[1]
    assert isinstance(processor.batch_decode(gen[:, batch["input_ids"].shape[1]:])[0], str)


@pytest.mark.parametrize("family", ALL)
def test_other_seed_gives_other_weights(family, tiny_checkpoints, tmp_path):
    a = weights(Path(tiny_checkpoints(family)))
    b = weights(build_tiny(family, tmp_path / "seed1", seed=1))
    assert a.keys() == b.keys()
    assert any(not torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("family", ALL)
def test_image_token_layout(family, loaded):
    model, processor = loaded(family)
    placeholder, runs_square, runs_wide, before, after = LAYOUT[family]
    assert placeholder in (processor.image_token, FEATURE_TOKEN.get(family))
    tok = processor.tokenizer
    befores = before if isinstance(before, tuple) else (before, before)  # per size where the two differ
    for size, runs, before in (((112, 112), runs_square, befores[0]), ((224, 112), runs_wide, befores[1])):
        batch = one_prompt(processor, scene_image(size))
        tokens = tok.convert_ids_to_tokens(batch["input_ids"][0].tolist())
        idx = [i for i, t in enumerate(tokens) if t == placeholder]
        starts = [i for i in idx if i == 0 or tokens[i - 1] != placeholder]
        ends = [i for i in idx if i + 1 == len(tokens) or tokens[i + 1] != placeholder]
        assert [e - s + 1 for s, e in zip(starts, ends)] == runs, size
        assert (tokens[idx[0] - 1] if idx[0] else None) == before
        if after is not None:
            assert tokens[idx[-1] + 1] == after
        with torch.no_grad():  # the model consumes exactly that many image features (it raises otherwise)
            model(**batch)


@pytest.mark.parametrize("family", ALL)
def test_config_token_ids_inside_vocabulary(family, loaded):
    model, processor = loaded(family)
    n = len(processor.tokenizer)
    found = []

    def walk(obj):
        if isinstance(obj, dict):
            for k, v in obj.items():
                if isinstance(k, str) and TOKEN_ID_KEY.search(k) and v is not None:
                    found.extend(v if isinstance(v, list) else [v])
                walk(v)

    walk(model.config.to_dict())
    walk(model.generation_config.to_dict())
    assert found and all(isinstance(i, int) and 0 <= i < n for i in found), found
    assert locate_decoder(model).text_config.vocab_size >= n
    image_id = next(getattr(model.config, k) for k in ("image_token_id", "image_patch_id", "image_token_index")
                    if getattr(model.config, k, None) is not None)
    placeholder = FEATURE_TOKEN.get(family, processor.image_token)
    assert image_id == processor.tokenizer.convert_tokens_to_ids(placeholder)


@pytest.mark.parametrize("family", ALL)
def test_text_geometry_is_tiny_gqa(family, loaded):
    model, _ = loaded(family)
    assert locate_decoder(model).geometry == GEOMETRY.get(family, Geometry(layers=2, heads=4, kv_heads=2, head_dim=16))


@pytest.mark.parametrize("family", ALL)
def test_reference_without_heads_reproduces_the_model(family, loaded):
    """The ablation reference runs each family's own kernel (eager + soft-capping for Gemma2, sdpa elsewhere)."""
    model, processor = loaded(family)
    batch = processor_inputs(processor, n=2)
    with torch.no_grad():
        base = model(**batch).logits
        with reference_ablation(model, []):
            ref = model(**batch).logits
    torch.testing.assert_close(ref, base, rtol=1e-5, atol=1e-5)


def test_paligemma_is_gemma2_with_softcaps_and_sliding_window(loaded):
    model, processor = loaded("paligemma")
    tc = model.config.text_config
    assert tc.model_type == "gemma2" and tc._attn_implementation == "eager"
    assert tc.attn_logit_softcapping and tc.final_logit_softcapping
    assert set(tc.layer_types) == {"sliding_attention", "full_attention"}
    batch = processor_inputs(processor, n=2)
    assert tc.sliding_window < batch["input_ids"].shape[1]  # the window really cuts in tests
    tok = processor.tokenizer
    ids = tok.convert_tokens_to_ids(["<loc0000>", "<loc1023>", "<seg127>"])
    assert tok.unk_token_id not in ids
    assert tok.decode(ids, skip_special_tokens=True).split() == ["<loc0000>", "<loc1023>", "<seg127>"]
    row = tok.convert_ids_to_tokens(batch["input_ids"][0].tolist())
    assert row[-1] == "\n" and row[row.index("<bos>") - 1] == "<image>"
    assert (batch["token_type_ids"] == 0).all()  # the whole prompt is the bidirectional prefix


def test_mrope_families_cover_their_rotary_frequencies(loaded):
    for family, rotary_fraction in (("qwen2_5_vl", 1.0), ("qwen3_vl", 1.0), ("glm4v", 0.5)):
        model, _ = loaded(family)
        rope = model.config.text_config.rope_parameters
        assert rope.get("partial_rotary_factor", 1.0) == rotary_fraction
        assert sum(rope["mrope_section"]) == int(16 * rotary_fraction) // 2, family
    qwen3, _ = loaded("qwen3_vl")
    assert qwen3.config.text_config.rope_parameters["mrope_interleaved"]
    assert qwen3.config.vision_config.deepstack_visual_indexes


def test_glm_box_tokens_survive_decoding(loaded):
    _, processor = loaded("glm4v")
    tok = processor.tokenizer
    text = "<|begin_of_box|>[10, 20, 30, 40]<|end_of_box|>"
    assert tok.decode(tok(text)["input_ids"], skip_special_tokens=True).replace(" ", "") == text.replace(" ", "")


def test_llava_next_prepends_bos(loaded):
    _, processor = loaded("llava_next")
    batch = processor_inputs(processor, n=2)
    tok = processor.tokenizer
    for row, mask in zip(batch["input_ids"], batch["attention_mask"]):
        assert row[mask.bool()][0] == tok.bos_token_id


def _backend(family: str, path: Path, tmp_path: Path, folder: str | None):
    import lmms_eval.models as lm_models

    if folder:
        link = tmp_path / folder
        link.symlink_to(Path(path).resolve())
        path = link
    name, extra, _ = BACKENDS[family]
    cls = lm_models.get_model(name)
    return cls, cls.create_from_arg_string(f"pretrained={path},device_map=cpu,device=cpu{extra}", {"batch_size": 1})


@pytest.mark.parametrize("family", sorted(BACKENDS))
def test_lmms_eval_backend_loads_and_generates_on_cpu(family, tiny_checkpoints, tmp_path):
    from lmms_eval.api.instance import GenerationResult, Instance

    cls, lm = _backend(family, tiny_checkpoints(family), tmp_path, BACKENDS[family][2])
    assert type(lm.model).__name__ == json.loads((Path(tiny_checkpoints(family)) / "config.json").read_text())[
        "architectures"][0]
    doc = {"image": scene_image(), "q": "Locate the red circle in the image."}
    lm.task_dict = {"t": {"s": {0: doc}}}
    gen_kwargs = {"max_new_tokens": 3, "temperature": 0, "until": ["<|never|>"]}
    if getattr(cls, "is_simple", True):
        args = (doc["q"], gen_kwargs, lambda d: [d["image"]], 0, "t", "s")
    else:
        def to_messages(d):
            return [{"role": "user", "content": [{"type": "image", "url": d["image"]},
                                                 {"type": "text", "text": d["q"]}]}]
        args = (doc["q"], to_messages, gen_kwargs, 0, "t", "s")
    request = Instance(request_type="generate_until", arguments=args, idx=0,
                       metadata={"task": "t", "doc_id": 0, "repeats": 1})
    (out,) = lm.generate_until([request])
    if isinstance(out, GenerationResult):
        # internvl_hf swallows generate errors into an empty answer without token counts: require the counts.
        assert out.token_counts is not None and out.token_counts.output_tokens >= 1
        out = out.text
    assert isinstance(out, str)


def test_glm4v_backend_picks_the_moe_class_without_flash_in_the_path(tiny_checkpoints, tmp_path):
    """Known lmms-eval 0.7.3 behaviour: a dense GLM-4.1V checkpoint loads as Glm4vMoe (random MLPs) by name."""
    _, lm = _backend("glm4v", tiny_checkpoints("glm4v"), tmp_path, None)
    assert type(lm.model).__name__ == "Glm4vMoeForConditionalGeneration"


def test_unknown_family_is_named():
    from vrh_lmms.base.errors import VRHError

    with pytest.raises(VRHError, match="unknown tiny family"):
        build_tiny("no_such_family", "/nonexistent")


def test_wide_image_passes_through_generate(loaded):
    """Multi-tile layouts (InternVL thumbnail, LLaVA-NeXT AnyRes, Idefics3 tiles) also run end to end."""
    for family in ("internvl", "llava_next", "idefics3"):
        model, processor = loaded(family)
        batch = one_prompt(processor, Image.new("RGB", (300, 200), (90, 90, 90)))
        with torch.no_grad():
            model.generate(**batch, max_new_tokens=2, do_sample=False)
