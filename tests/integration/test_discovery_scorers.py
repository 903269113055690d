"""The discovery options of the paper's replication through real discovery runs on a tiny Qwen2.5-VL, each checked
against eager attention (`output_attentions=True`) on the very inputs discovery forwarded:

- `--key-tokens`: a box holding one whole cell and a quarter of its right neighbour selects both under `any` (the
  paper's rule) and the whole cell only under `overlap` (at least half a cell);
- the query sets `out_random1` (one answer row, drawn from the doc key) and `in+out` (the union of the rows);
- the Localization Heads scorer's per-sample input: the last input token's attention over the image token grid;
- presets reach their cell's ranking through the heads file (and through `cell=` of resolve_spec).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np
import pytest
import torch
from oracles.intervention_refs import eager_attentions

from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.base.heads.spec import resolve_spec
from vrh_lmms.runs.discovery import collector as collector_mod
from vrh_lmms.runs.discovery import localization
from vrh_lmms.runs.discovery.evidence import EVIDENCE_KINDS, get_kind
from vrh_lmms.runs.discovery.queries import expression_rows, token_pieces
from vrh_lmms.runs.discovery.run import DiscoverySpec, run_discovery, sidecars
from vrh_lmms.runs.discovery.store import PartStore

torch.set_num_threads(1)
PIXELS = 224 * 224  # 224 x 224 scenes: an 8 x 8 grid of 28-pixel merged cells, image tokens in row-major order
SIDE, CELL = 8, 28.0
N = 2
# Cell A = row 3, column 3 ([84, 84, 112, 112]) whole, and a quarter (7 of 28 columns) of its right neighbour B.
BOX = (84.0, 84.0, 112.0 + CELL / 4, 112.0)
A, B = 3 * SIDE + 3, 3 * SIDE + 4


@pytest.fixture(scope="module")
def lm(tiny_checkpoints, tmp_path_factory):
    from vrh_lmms.harness import lmms

    mp = pytest.MonkeyPatch()
    mp.setenv("VRH_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    mp.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": N, "seed": 11, "scene": {"image_size": 224}}))
    ckpt = tiny_checkpoints("qwen2_5_vl")
    yield lmms.build_model("vrh_qwen25", f"pretrained={ckpt},dtype=float32,min_pixels={PIXELS},max_pixels={PIXELS}")
    mp.undo()


def discover(lm, tmp_path, monkeypatch, **spec) -> tuple:
    """One discovery with the ground-truth box replaced by BOX; returns the heads file, the parts, the inputs each
    doc was forwarded with (by doc key) and the Localization Heads maps each doc produced (by doc key)."""
    inputs, maps, expressions = {}, {}, {}
    real_forward, real_sample = collector_mod.teacher_forced_inputs, collector_mod.SampleCollector._sample
    real_stats = localization.sample_statistics
    seen = {}

    def forward(*args, **kwargs):
        seen["inputs"] = real_forward(*args, **kwargs)
        return seen["inputs"]

    def stats(grid_maps):
        seen["maps"] = np.array(grid_maps)
        return real_stats(grid_maps)

    def sample(self, tensors, answer, expression, target, kind, key, collect_means, localize):
        out = real_sample(self, tensors, answer, expression, target, kind, key, collect_means, localize)
        inputs[key], expressions[key] = seen.pop("inputs"), expression
        if "maps" in seen:
            maps[key] = seen.pop("maps")
        return out

    box_kind = get_kind("box")
    monkeypatch.setitem(EVIDENCE_KINDS, "box", dataclasses.replace(
        box_kind, target=lambda doc, where: dataclasses.replace(box_kind.target(doc, where), box=BOX)))
    monkeypatch.setattr(collector_mod, "teacher_forced_inputs", forward)
    monkeypatch.setattr(collector_mod.SampleCollector, "_sample", sample)
    monkeypatch.setattr(localization, "sample_statistics", stats)
    out = tmp_path / "heads.json"
    run_discovery(DiscoverySpec(model="vrh_qwen25", model_args="pretrained=x", tasks=["vrh_synth_grounding"],
                                output=str(out), limit=N, gen_kwargs="max_new_tokens=6", **spec), lm=lm)
    store = PartStore(sidecars(out)["parts"])
    parts = {key: store.read(key) for key in store.keys()}
    assert set(parts) == set(inputs) and len(parts) == N
    return load_heads_file(out), parts, inputs, maps, expressions


def image_positions(lm, ids: torch.Tensor) -> torch.Tensor:
    return torch.nonzero(ids == lm.model.config.image_token_id).flatten()


def eager_rows_mass(lm, batch, rows: list[int], keys: torch.Tensor) -> np.ndarray:
    """(layers, heads): eager attention of `rows` summed over `keys`, averaged over the rows."""
    attn = eager_attentions(lm.model, batch)[0].double()  # (layers, heads, T, T)
    return attn[:, :, rows][..., keys].sum(-1).mean(-1).numpy()


@pytest.mark.parametrize("rule,cells", [("any", [A, B]), ("overlap", [A]), ("center", [A])])
def test_key_token_rule_reaches_the_box_mask(rule, cells, lm, tmp_path, monkeypatch):
    hf, parts, inputs, _, _ = discover(lm, tmp_path, monkeypatch, key_tokens=rule, cells=["out,sum,mean"])
    assert hf.scoring["key_tokens"] == rule == hf.scoring["box_rule"]
    for key, part in parts.items():
        batch = inputs[key]
        assert part.meta["n_box_tokens"] == len(cells)
        keys = image_positions(lm, batch["input_ids"][0])[cells]
        prompt_len, n = part.meta["prompt_len"], part.meta["n_answer"]
        expect = eager_rows_mass(lm, batch, list(range(prompt_len - 1, prompt_len - 1 + n)), keys)
        np.testing.assert_allclose(part.stats["out_sum"], expect, atol=2e-5)


def test_query_sets_localization_input_and_presets(lm, tmp_path, monkeypatch):
    hf, parts, inputs, maps, expressions = discover(lm, tmp_path, monkeypatch, primary="qrhead")
    assert hf.scoring["preset"] == "qrhead" and hf.scoring["cell"] == "in,sum,mean"
    assert hf.ranking == hf.cell_ranking("in,sum,mean")
    assert set(maps) == set(parts)
    for key, part in parts.items():
        batch = inputs[key]
        ids = batch["input_ids"][0]
        prompt_len, n = part.meta["prompt_len"], part.meta["n_answer"]
        out = list(range(prompt_len - 1, prompt_len - 1 + n))
        # the documented draw: a generator seeded by the doc key's sha256 picks one answer row
        seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
        drawn = out[int(np.random.default_rng(seed).integers(len(out)))]
        assert part.meta["out_random1_row"] == [drawn]
        pieces = token_pieces(lm.tokenizer, ids.tolist())
        in_rows = expression_rows(pieces, expressions[key], limit=prompt_len)
        assert len(in_rows) == part.meta["rows"]["in"] >= 1 and max(in_rows) < prompt_len - 1
        box = image_positions(lm, ids)[[A]]
        np.testing.assert_allclose(part.stats["out_random1_sum"], eager_rows_mass(lm, batch, [drawn], box),
                                   atol=2e-5)
        union = sorted(set(in_rows) | set(out))
        np.testing.assert_allclose(part.stats["in+out_sum"], eager_rows_mass(lm, batch, union, box), atol=2e-5)
        # Localization Heads: the last input token's attention on the image tokens, on the 8 x 8 grid
        attn = eager_attentions(lm.model, batch)[0].double()
        expect = attn[:, :, prompt_len - 1][..., image_positions(lm, ids)].numpy()
        layers, heads = expect.shape[:2]
        np.testing.assert_allclose(maps[key], expect.reshape(layers, heads, SIDE, SIDE), atol=2e-5)
        np.testing.assert_array_equal(part.stats[localization.ENTROPY],
                                      localization.sample_statistics(maps[key])[localization.ENTROPY])
    # presets: each reaches its cell's ranking by name, also through resolve_spec's cell=
    assert hf.extra["presets"] == {"retrieval_heads": "out,argmax,mean", "qrhead": "in,sum,mean",
                                   "ocr_heads": "out,argmax,mean", "vera": "out,sum,mean", "vrh": "out,sum,mean",
                                   "localization_heads": "localization_heads"}
    for preset, cell in hf.extra["presets"].items():
        assert hf.cell_ranking(preset) == hf.cell_ranking(cell)
        assert set(resolve_spec("top3", hf.geometry, heads_file=hf, cell=preset).heads) == \
            set(hf.cell_ranking(cell)[:3])
    # The tiny model has 2 layers, and the released method drops layers 0 and 1: every sample falls back to its one
    # head of largest image mass, so the frequencies sum to 1.
    assert np.asarray(hf.cells["localization_heads"]["scores"]).sum() == pytest.approx(1.0)


def test_unknown_key_token_rule_is_refused_before_anything_loads(tmp_path):
    from vrh_lmms.base.errors import VRHError
    from vrh_lmms.runs.discovery.run import discovery_checks
    from vrh_lmms.runs.preflight import preflight

    spec = DiscoverySpec(model="vrh_qwen25", model_args="pretrained=nowhere", tasks=["vrh_synth_grounding"],
                         output=str(tmp_path / "heads.json"), key_tokens="half")
    with pytest.raises(VRHError, match="--key-tokens 'half': use one of overlap, any, center"):
        preflight(discovery_checks(spec, force=False))
    assert not any(tmp_path.iterdir())
