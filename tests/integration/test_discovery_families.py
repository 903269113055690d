"""Discovery through every HF-class family's vrh_* backend: the interceptor sees the backend's own inputs, the
family's layout finds the image tokens, capture runs, and a complete heads file comes out."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from vrh_lmms.discovery.run import DiscoverySpec, run_discovery, sidecars
from vrh_lmms.discovery.scoring import all_cells
from vrh_lmms.discovery.store import PartStore
from vrh_lmms.heads.heads_file import load_heads_file

torch.set_num_threads(1)

QWEN_PIXELS = f"min_pixels={28 * 28 * 16},max_pixels={28 * 28 * 64}"
CASES = [
    ("vrh_qwen25", "qwen2_5_vl", QWEN_PIXELS),
    ("vrh_qwen3", "qwen3_vl", QWEN_PIXELS),
    ("vrh_internvl", "internvl", ""),
    ("vrh_llava_next", "llava_next", ""),
    ("vrh_glm4v", "glm4v", ""),
    ("vrh_paligemma", "paligemma", ""),
    ("vrh_qwen25_omni", "qwen2_5_omni", ""),  # Qwen2.5-VL's image layout, through the thinker's decoder
]
N = 2


@pytest.mark.parametrize("model_id,family,extra", CASES, ids=[c[0] for c in CASES])
def test_discovery_runs_on_family(model_id, family, extra, tiny_checkpoints, tmp_path, monkeypatch):
    from vrh_lmms import lmms

    monkeypatch.setenv("VRH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": N, "seed": 7, "scene": {"image_size": 168}}))
    ckpt = tiny_checkpoints(family)
    args = ",".join(a for a in (f"pretrained={ckpt}", "dtype=float32", extra) if a)
    lm = lmms.build_model(model_id, args)
    out = tmp_path / "heads.json"
    run_discovery(DiscoverySpec(model=model_id, model_args=args, tasks=["vrh_synth_grounding"], output=str(out),
                                limit=N, gen_kwargs="max_new_tokens=6"), lm=lm)
    hf = load_heads_file(out)
    assert hf.geometry == lm.vrh_decoder.geometry and hf.model["family"] == lm.vrh_family
    assert hf.scoring["n_samples"] == N and set(hf.cells) == set(all_cells())
    store = PartStore(sidecars(out)["parts"])
    for key in store.keys():
        part = store.read(key)
        assert part.meta["n_image_tokens"] > 0 and part.meta["n_box_tokens"] >= 1, part.meta
        assert part.meta["rows"]["in"] >= 1, "the referring expression was not found in the prompt"
        if part.meta["rows"]["out"]:
            mass = part.stats["in_sum"]
            assert np.all((mass >= 0) & (mass <= 1 + 1e-6))
    # The box tokens are a subset of the image tokens: mass on the box never exceeds mass on the whole image,
    # which for a softmax row is at most 1.
    assert np.nanmax(np.asarray(hf.cells["out,sum,mean"]["scores"])) <= 1 + 1e-6
