"""Support for the per-family test files of families served by our chat-template backend (Molmo 2, MiniCPM-V):
the checks every such family runs, parametrized by its wrapper class and tiny checkpoint (no tests here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from oracles.reference_ablation import reference_ablation

from support.wrappers import model_inputs, recorded_generate, run, scene_docs
from vrh_lmms.base.heads import HeadRef
from vrh_lmms.base.heads.geometry import parse_head
from vrh_lmms.model.capture.verify import check_layout
from vrh_lmms.model.tiny.inputs import load_tiny, render_prompt, scene_messages

HEADS = "L0H1;L1H0"
HEAD_REFS = [HeadRef(0, 1), HeadRef(1, 0)]


def _refs(heads: str) -> list[HeadRef]:
    return [parse_head(h) for h in heads.split(";")]


def plain_greedy_answers(ckpt: str, docs: dict[int, dict[str, Any]], dtype=torch.bfloat16) -> list[str]:
    """What the backend should answer, by plain transformers: the checkpoint's chat template over one image item and
    the task text, the processor, greedy generate, special tokens skipped."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model = AutoModelForImageTextToText.from_pretrained(ckpt, dtype=dtype).eval()
    processor = AutoProcessor.from_pretrained(ckpt)
    out = []
    for doc in docs.values():
        message = [{"role": "user", "content": [{"type": "image"},
                                                {"type": "text", "text": f"Locate {doc['expression']} in the image."}]}]
        prompt = processor.apply_chat_template(message, add_generation_prompt=True, tokenize=False)
        inputs = processor(text=[prompt], images=[doc["image"]], return_tensors="pt")
        inputs["pixel_values"] = inputs["pixel_values"].to(dtype)
        with torch.no_grad():
            ids = model.generate(**inputs, max_new_tokens=6, do_sample=False)
        out.append(processor.tokenizer.decode(ids[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))
    return out


def check_heads_none_answers_like_plain_transformers(wrapper_cls, ckpt: str) -> None:
    """heads=none answers equal plain greedy generation (the backend's default bfloat16); in float32 a left-padded
    batch of three answers as one prompt at a time."""
    docs = scene_docs(3)
    expected = plain_greedy_answers(ckpt, docs)
    got = run(wrapper_cls(pretrained=ckpt, heads="none"), docs)
    assert got == expected and len(set(expected)) > 1, expected
    one = run(wrapper_cls(pretrained=ckpt, heads="none", dtype="float32"), docs)
    assert run(wrapper_cls(pretrained=ckpt, heads="none", dtype="float32", batch_size=3), docs) == one


def check_ablated_logits_equal_eager_reference(wrapper_cls, ckpt: str, heads: str = HEADS,
                                               **model_args: Any) -> dict[str, torch.Tensor]:
    """Logits of the wrapper's ablated model on the exact inputs its backend passed to generate equal eager
    attention with the heads' outputs zeroed; returns those inputs. `heads`: where the tiny decoder has them (a
    hybrid one has none in its linear-attention layers); `model_args`: the backend's own."""
    lm = wrapper_cls(pretrained=ckpt, heads=heads, dtype="float32", **model_args)
    model = lm.model
    with recorded_generate(model) as calls:
        run(lm, scene_docs(1), max_new_tokens=2)
    inputs = model_inputs(calls[0])
    with torch.no_grad():
        got = model(**inputs).logits
        lm.vrh_ablator.restore()
        clean = model(**inputs).logits
        with reference_ablation(model, _refs(heads), base="eager"):
            ref = model(**inputs).logits
    # left-padding positions attend to nothing, and eager and sdpa fill them differently: compare the others (a
    # backend that pads to a multiple of 8, as Gemma's, has some even for one request)
    valid = inputs["attention_mask"].bool() if "attention_mask" in inputs else torch.ones(got.shape[:2], dtype=bool)
    assert (clean - ref)[valid].abs().max() > 1e-2, "the ablation must move the logits for the comparison to mean much"
    torch.testing.assert_close(got[valid], ref[valid], rtol=1e-4, atol=1e-4)
    return inputs


def check_answers_depend_on_image_and_heads(ckpt: str, max_new_tokens: int = 4, prepare=lambda batch: batch,
                                            heads: str = HEADS) -> None:
    """Six scenes, one prompt: at least four different answers; ablating two heads changes some answer. `prepare`:
    what the processor's batch needs before generate (e.g. as_float32 where its pixels come in another dtype)."""
    from vrh_lmms.base.heads.spec import HeadSet
    from vrh_lmms.model.ablation import Ablator
    from vrh_lmms.model.backbone import locate_decoder

    model, processor = load_tiny(ckpt)
    docs = scene_docs(6)

    def answers() -> list[str]:
        out = []
        for doc in docs.values():
            text = render_prompt(processor, scene_messages("the object", doc["image"]))
            batch = prepare(processor(text=[text], images=[doc["image"]], return_tensors="pt"))
            with torch.no_grad():
                ids = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False)
            out.append(processor.tokenizer.decode(ids[0, batch["input_ids"].shape[1]:]))
        return out

    plain = answers()
    assert len(set(plain)) >= 4, plain
    ablator = Ablator(model, locate_decoder(model))
    refs = _refs(heads)
    ablator.apply(HeadSet(heads=tuple(refs), spec=heads, kind="explicit", k=len(refs)), mode="zero")
    assert answers() != plain


def check_layout_by_perturbation(ckpt: str, family: str, size: tuple[int, int], vision_attention: bool = True) -> None:
    """A rectangle drawn on a flat image changes exactly the predicted tokens' inputs to text layer 0 (the vision
    tower's attention zeroed, so each token carries its own cell; `vision_attention=False`: a model without any,
    as an encoder-free embedder)."""
    model, processor = load_tiny(ckpt)

    def batch_of(proc, image):
        return proc(text=[render_prompt(proc, scene_messages("the red square", image))], images=[image],
                    return_tensors="pt")

    for frac in [(0.2, 0.3, 0.55, 0.7), (0.6, 0.05, 0.95, 0.4)]:
        check = check_layout(model, processor, family, size, batch_of, frac=frac)
        assert (check.hooked > 0) == vision_attention and check.clearance >= 2.0
        assert 0 < len(check.changed) < check.image_tokens
        assert check.changed == check.predicted, (size, sorted(check.changed ^ check.predicted))


def check_discovery_end_to_end(model_id: str, family: str, ckpt: str, tmp_path: Path, monkeypatch,
                               extra_args: str = ""):
    """vrh_synth_grounding through lmms-eval's evaluator and the family's wrapper: a complete heads file, box tokens
    found among the image tokens, mass on the box never above the mass on the image. `extra_args`: ",k=v" model
    args of the backend."""
    from vrh_lmms.base.heads.heads_file import load_heads_file
    from vrh_lmms.harness import lmms
    from vrh_lmms.runs.discovery.run import DiscoverySpec, run_discovery, sidecars
    from vrh_lmms.runs.discovery.scoring import all_cells
    from vrh_lmms.runs.discovery.store import PartStore

    monkeypatch.setenv("VRH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 2, "seed": 7, "scene": {"image_size": 168}}))
    args = f"pretrained={ckpt},dtype=float32{extra_args}"
    lm = lmms.build_model(model_id, args)
    out = tmp_path / "heads.json"
    run_discovery(DiscoverySpec(model=model_id, model_args=args, tasks=["vrh_synth_grounding"], output=str(out),
                                limit=2, gen_kwargs="max_new_tokens=6"), lm=lm)
    hf = load_heads_file(out)
    assert hf.model["family"] == family and hf.geometry == lm.vrh_decoder.geometry
    assert hf.scoring["n_samples"] == 2 and set(hf.cells) == set(all_cells())
    store = PartStore(sidecars(out)["parts"])
    assert store.keys()
    for key in store.keys():
        meta = store.read(key).meta
        assert meta["n_image_tokens"] > 0 and meta["n_box_tokens"] >= 1 and meta["rows"]["in"] >= 1, meta
    assert np.nanmax(np.asarray(hf.cells["out,sum,mean"]["scores"])) <= 1 + 1e-6
    return hf
