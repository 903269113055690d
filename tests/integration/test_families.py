"""The family registry: one record per family, every other table derived from it, close-name suggestions, and
the worked example of docs/adding-a-model.md run as written (one record + a wrapper module, on a tiny checkpoint)."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest
import yaml

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.families import FAMILIES, Family, Wrapper, get_family, register, unregister
from vrh_lmms.base.paths import tasks_path

# The hand-kept tables the registry replaced, as they were: the derived tables must say exactly this.
OLD_WRAPPERS = {
    "vrh_qwen25": ("qwen2_5_vl", "VRHQwen25", "VRHQwen25Chat"),
    "vrh_qwen3": ("qwen3_vl", "VRHQwen3", "VRHQwen3Chat"),
    "vrh_internvl": ("internvl_hf", None, "VRHInternVLChat"),
    "vrh_internvl3": ("internvl_remote", "VRHInternVL3", None),
    "vrh_internvl3_5": ("internvl_remote", "VRHInternVL3_5", None),
    "vrh_internvl2": ("internvl_remote", "VRHInternVL2", None),
    "vrh_llava_next": ("llava_next", "VRHLlavaNext", "VRHLlavaNextChat"),
    "vrh_glm4v": ("glm4v", "VRHGLM4V", None),
    "vrh_phi4": ("phi4", "VRHPhi4", "VRHPhi4Chat"),
    "vrh_paligemma": ("paligemma", "VRHPaliGemma", None),
    "vrh_magma": ("magma", "VRHMagma", None),
    "vrh_deepseek_vl2": ("deepseek_vl2", "VRHDeepseekVL2", None),
    "vrh_qwen25_omni": ("qwen2_5_omni", "VRHQwen25Omni", None),  # added with its family (issue 29)
    "vrh_llava": ("llava", "VRHLlava", "VRHLlavaChat"),  # added with their families (issue 49)
    "vrh_llava_onevision": ("llava", "VRHLlavaOneVision", "VRHLlavaOneVisionChat"),
    "vrh_gemma3": ("gemma3", "VRHGemma3", None),
    "vrh_idefics3": ("idefics3", "VRHIdefics3", None),
    "vrh_smolvlm": ("idefics3", "VRHIdefics3", None),
    "vrh_mistral3": ("mistral3", "VRHMistral3", None),
    "vrh_llama4": ("llama4", "VRHLlama4", None),
    "vrh_hf": ("hf", None, "VRHHf"),  # any image-text-to-text checkpoint (issue 49)
}
OLD_TINY = {"qwen2_5_vl", "qwen3_vl", "internvl", "llava_next", "paligemma", "glm4v", "idefics3",
            "qwen2_5_omni", "llava", "llava_onevision", "gemma3", "mistral3", "llama4",
            "molmo2"}  # qwen2_5_omni: 29; llava..: 49
OLD_BUILDERS = {"qwen2_5_vl": "merged_patch_grid", "qwen3_vl": "merged_patch_grid", "glm4v": "merged_patch_grid",
                "internvl": "internvl_tiles", "llava_next": "llava_next_anyres", "paligemma": "square_grid",
                "deepseek_vl": "deepseek_vl_padded", "deepseek_vl2": "deepseek_vl2_tiles",
                "phi4_multimodal": "phi4_dynamic_hd", "idefics3": "idefics3_tiles",
                "magma": "magma_crops",  # magma: added with its layout (issue 28 item 5)
                "llava": "clip_square", "llava_onevision": "onevision_anyres", "gemma3": "gemma3_crops",
                "mistral3": "pixtral_rows", "llama4": "llama4_tiles"}  # issue 49
OLD_CONVENTIONS = {"qwen2_5_vl", "qwen3_vl", "glm4v", "internvl", "llava_next", "paligemma", "deepseek_vl2",
                   "phi4_multimodal", "magma", "generic", "llava"}  # llava: issue 49
# the twelve vrh_* lines the grounding template carried before the wrappers' set_active made them redundant
OLD_TEMPLATE_LINES = {"vrh_qwen25": "qwen2_5_vl", "vrh_qwen3": "qwen3_vl", "vrh_internvl": "internvl",
                      "vrh_internvl3": "internvl", "vrh_internvl3_5": "internvl", "vrh_internvl2": "internvl",
                      "vrh_llava_next": "llava_next", "vrh_glm4v": "glm4v", "vrh_phi4": "phi4_multimodal",
                      "vrh_paligemma": "paligemma", "vrh_magma": "magma", "vrh_deepseek_vl2": "deepseek_vl2",
                      "vrh_qwen25_omni": "qwen2_5_vl",  # omni (issue 29): no template line; Qwen2.5-VL's convention
                      # issue 49: no template lines either
                      "vrh_llava": "llava", "vrh_llava_onevision": "llava_next", "vrh_gemma3": "generic",
                      "vrh_idefics3": "generic", "vrh_smolvlm": "generic", "vrh_mistral3": "generic",
                      "vrh_llama4": "generic",
                      "vrh_hf": "generic"}  # vrh_hf (issue 49): no template line; no convention of its own
# families added for issue 49 from the other end of its list (kept apart from the lists above so branches merge)
OLD_WRAPPERS.update({"vrh_molmo2": ("molmo2", "VRHMolmo2", None),
                     "vrh_minicpmv": ("minicpmv", "VRHMiniCPMV", None)})
OLD_TINY |= {"molmo2", "minicpmv"}
OLD_BUILDERS.update({"molmo2": "molmo2_views", "minicpmv": "minicpmv_slices"})
OLD_CONVENTIONS |= {"molmo2", "minicpmv"}
OLD_WRAPPERS["vrh_gemma4"] = ("gemma4", "VRHGemma4", None)  # Gemma 4, added apart so branches merge
OLD_TINY.add("gemma4")
OLD_BUILDERS["gemma4"] = "gemma4_grid"
OLD_TEMPLATE_LINES["vrh_gemma4"] = "generic"
OLD_TEMPLATE_LINES.update({"vrh_molmo2": "molmo2", "vrh_minicpmv": "minicpmv"})  # no template lines
# Qwen3.5 (dense, MoE): Qwen3-VL's layout (no new builder) and box convention (issue 49)
OLD_WRAPPERS["vrh_qwen3_5"] = ("qwen3_5", "VRHQwen3_5", "VRHQwen3_5Chat")
OLD_TINY |= {"qwen3_5"}
OLD_TEMPLATE_LINES["vrh_qwen3_5"] = "qwen3_vl"  # no template line
# LLaVA-OneVision-1.5: Qwen2.5-VL's layout (no new builder), the generic box prompt
OLD_WRAPPERS["vrh_llava_onevision1_5"] = ("llava_onevision1_5", "VRHLlavaOneVision15", "VRHLlavaOneVision15Chat")
OLD_TINY |= {"llava_onevision1_5"}
OLD_TEMPLATE_LINES["vrh_llava_onevision1_5"] = "generic"  # no template line


def test_derived_tables_say_what_the_hand_kept_tables_said():
    from vrh_lmms.base.boxes.known import CONVENTIONS
    from vrh_lmms.model.capture import tilings
    from vrh_lmms.model.tiny.registry import TINY_FACTORIES
    from vrh_lmms.model_wrappers.manifests import WRAPPERS, manifests

    assert dict(WRAPPERS) == OLD_WRAPPERS
    assert {m.model_id for m in manifests()} == set(OLD_WRAPPERS)
    assert set(TINY_FACTORIES) == OLD_TINY
    assert {k: v.__name__ for k, v in tilings.BUILDERS.items()} == OLD_BUILDERS
    assert set(CONVENTIONS) == OLD_CONVENTIONS


def test_every_wrapper_class_names_the_family_that_lists_it():
    for fam in FAMILIES.values():
        for w in fam.wrappers:
            module = importlib.import_module(w.module_path)
            for name in filter(None, (w.simple, w.chat)):
                assert getattr(module, name).vrh_family == fam.name, (w.model_id, name)


def test_unknown_names_suggest_the_close_ones():
    from vrh_lmms.base.boxes import get_convention
    from vrh_lmms.model.capture.layouts import layout_name
    from vrh_lmms.model.tiny.registry import build_tiny
    from vrh_lmms.model_wrappers.manifests import WRAPPERS

    with pytest.raises(VRHError, match=r"unknown family 'qwen25_vl' \(did you mean 'qwen2_5_vl'"):
        get_family("qwen25_vl")
    with pytest.raises(VRHError, match=r"did you mean 'qwen3_vl'"):
        build_tiny("qwen3vl", "/nonexistent/never-written")
    with pytest.raises(ValueError, match=r"did you mean 'internvl'"):
        get_convention("internv")
    with pytest.raises(VRHError, match=r"did you mean 'llava_next'"):
        layout_name("llava_nxt")
    with pytest.raises(KeyError, match=r"did you mean 'vrh_qwen25'"):
        WRAPPERS["vrh_qwen2.5"]
    from vrh_lmms.harness import preload

    with pytest.raises(VRHError, match=r"--model 'vrh_qwen2.5' is not a registered model \(did you mean 'vrh_qwen25'"):
        preload.check_model_name("vrh_qwen2.5")
    with pytest.raises(VRHError, match=r"unknown family 'zzz'; known: deepseek_vl2, "):
        get_family("zzz")  # nothing close: no suggestion, the full list


def test_register_refuses_a_name_that_would_mean_two_things():
    from vrh_lmms.base.boxes import conventions as conv

    base = dict(model_types=("x",), layer_paths=("model.layers",))
    with pytest.raises(VRHError, match="already registered"):
        register(Family("qwen2_5_vl", **base))
    with pytest.raises(VRHError, match="'vrh_qwen25' already belongs to family 'qwen2_5_vl'"):
        register(Family("x1", **base, wrappers=(Wrapper("vrh_qwen25", "m", "C"),)))
    with pytest.raises(VRHError, match="box convention 'internvl' differs"):
        register(Family("x2", **base, convention=conv.Convention("internvl", "s", "{expression}", "norm1000")))
    with pytest.raises(VRHError, match="layout 'internvl' already has another builder"):
        register(Family("x3", **base, layout="internvl", layout_builder="vrh_lmms.model.capture.tilings:square_grid"))
    assert not {"x1", "x2", "x3"} & set(FAMILIES)


def test_template_leaves_vrh_models_to_their_wrappers():
    """The removed lines named, for each vrh_* model, the convention its wrapper's family sets on load; the
    wrapper's `set_active` outranks the model-name mapping, and a mapping line without parameters fills nothing
    in, so with the wrapper active the resolution is the same with or without the line."""
    from vrh_lmms.base.boxes import context
    from vrh_lmms.model_wrappers.manifests import WRAPPERS

    text = (tasks_path() / "grounding" / "_vrh_grounding_template.yaml").read_text()
    kwargs = yaml.safe_load(re.sub(r"!function \S+", "f", text))["lmms_eval_specific_kwargs"]
    assert not [k for k in kwargs if k.startswith("vrh_")]
    assert set(OLD_TEMPLATE_LINES) == set(WRAPPERS)
    by_id = {w.model_id: f for f in FAMILIES.values() for w in f.wrappers}
    try:
        for model_id, old in OLD_TEMPLATE_LINES.items():
            fam = by_id[model_id]
            assert fam.box_convention == old
            context.clear_active()
            context.set_active(fam.box_convention, min_pixels=3136, max_pixels=50176)
            # lmms-eval hands the task the model's own entry, or `default` when the model has none
            with_line = context.resolve({**kwargs["default"], "convention": old})
            without = context.resolve(kwargs.get(model_id, kwargs["default"]))
            assert with_line == without and without.source == "active", model_id
    finally:
        context.clear_active()


# ------------------------------------------------------------------------------------ the guide's example
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "adding-a-model.md"


def _guide_blocks() -> tuple[str, str, str]:
    text = GUIDE.read_text()
    file_block = re.search(r"<!-- file: (\S+) -->\n```python\n(.*?)```", text, re.S)
    register_block = re.search(r"<!-- register -->\n```python\n(.*?)```", text, re.S)
    assert file_block and register_block, "docs/adding-a-model.md lost its example blocks"
    return file_block.group(1), file_block.group(2), register_block.group(1)


@pytest.fixture
def myvlm(tmp_path, monkeypatch):
    """The guide's wrapper module written out and its record registered, exactly as the guide has them."""
    rel, module_code, register_code = _guide_blocks()
    path = tmp_path / "plugin" / rel
    path.parent.mkdir(parents=True)
    (path.parent / "__init__.py").write_text("")
    path.write_text(module_code)
    monkeypatch.syspath_prepend(str(tmp_path / "plugin"))
    exec(compile(register_code, str(GUIDE), "exec"), {})
    try:
        yield get_family("myvlm")
    finally:
        unregister("myvlm")
        for name in [m for m in sys.modules if m == "mymodels" or m.startswith("mymodels.")]:
            del sys.modules[name]


def test_guide_example_adds_a_family_with_one_record_and_its_wrapper(myvlm, tmp_path, tiny_checkpoints):
    from lmms_eval.models.registry_v2 import ModelRegistryV2
    from support.wrappers import run, scene_docs
    from test_wrappers import HEADS, QWEN_PIXELS

    from vrh_lmms.model.capture.layouts import layout_name
    from vrh_lmms.model.tiny.registry import TINY_FACTORIES, build_tiny
    from vrh_lmms.model_wrappers.manifests import WRAPPERS, manifests
    from vrh_lmms.model_wrappers.qwen2_5_vl import VRHQwen25

    # every derived table has it
    assert WRAPPERS["vrh_myvlm"] == ("mymodels.myvlm", "VRHMyVLM", None)
    assert "myvlm" in TINY_FACTORIES and layout_name("myvlm") == "qwen2_5_vl"
    registry = ModelRegistryV2()
    for m in manifests():
        registry.register_manifest(m)
    cls = registry.get_model_class("vrh_myvlm")
    assert cls.__name__ == "VRHMyVLM" and cls.vrh_family == "myvlm"
    # its tiny factory writes the very checkpoint the qwen2_5_vl factory writes
    ckpt = build_tiny("myvlm", tmp_path / "tiny-myvlm")
    reference_ckpt = tiny_checkpoints("qwen2_5_vl")
    for name in ("config.json", "model.safetensors"):
        assert (ckpt / name).read_bytes() == (reference_ckpt / name).read_bytes(), name
    # and its wrapper ablates heads as the family it copies does
    docs = scene_docs(2)
    wrapper = cls(pretrained=str(ckpt), heads=HEADS, **QWEN_PIXELS)
    record = wrapper.vrh_record()
    assert record["family"] == "myvlm" and wrapper.vrh_ablator.active and wrapper.vrh_ablator.mode == "zero"
    got = run(wrapper, docs)
    del wrapper
    reference = VRHQwen25(pretrained=str(ckpt), heads=HEADS, **QWEN_PIXELS)
    assert run(reference, docs) == got
