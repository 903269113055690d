"""Discovery on evidence in one of several images (`vrh_synth_haystack`: kinds `image_box` and `image`) through the
real lmms-eval backends of tiny Qwen2.5-VL, Qwen3-VL (simple) and InternVL (internvl_hf, chat): the backend hands
the model every image of the doc in order (the interceptor's tensors carry one grid / tile group per image, as the
processor makes them from the doc's images), and the captured attention of the answer rows on the evidence tokens
equals eager attention (`output_attentions=True`) on the very inputs discovery forwarded. Evidence positions are
derived here independently: image k's tokens are the k-th run of image placeholders; Qwen's box tokens are the
merged cells (the image split evenly by its `image_grid_thw` row) at least half inside the box, else the cell
holding its centre. `vrh-lmms sweep` and `report` then run on the task with the heads file."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from oracles.intervention_refs import answer_rows_mass, eager_attentions

from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.runs.discovery import collector as collector_mod
from vrh_lmms.runs.discovery.controls import IMAGE_MASS
from vrh_lmms.runs.discovery.run import DiscoverySpec, run_discovery, sidecars
from vrh_lmms.runs.discovery.store import PartStore
from vrh_lmms.tasks.common.haystack import doc_to_visual, make_doc

torch.set_num_threads(1)
N = 2
CONFIG = {"n": N, "seed": 1, "n_images": 3, "sizes": [112, 168]}
TASK = "vrh_synth_haystack"
# Qwen: pixel bounds that keep the scenes' own sizes (112, 168: multiples of 28), so the grids tell images apart
BACKENDS = {"qwen2_5_vl": ("vrh_qwen25", ",min_pixels=3136,max_pixels=200704"), "internvl": ("vrh_internvl", ""),
            "qwen3_vl": ("vrh_qwen3", ",min_pixels=4096,max_pixels=262144")}


def runs(ids: torch.Tensor, token_id: int) -> list[list[int]]:
    """Maximal runs of consecutive `token_id` positions, in order (one per image)."""
    pos = torch.nonzero(ids == token_id).flatten().tolist()
    out: list[list[int]] = []
    for p in pos:
        if out and out[-1][-1] == p - 1:
            out[-1].append(p)
        else:
            out.append([p])
    return out


def qwen_box_positions(run: list[int], grid_thw, size, box) -> list[int]:
    """Qwen2.5-VL tokens of one image: its (gh / 2) x (gw / 2) merged cells split the whole (squashed) image
    evenly, row-major; those at least half inside the box, else the one holding its centre."""
    _, gh, gw = (int(v) for v in grid_thw)
    rows, cols = gh // 2, gw // 2
    assert len(run) == rows * cols
    cw, ch = size[0] / cols, size[1] / rows
    x1, y1, x2, y2 = box
    chosen = []
    for r in range(rows):
        for c in range(cols):
            ix = max(0.0, min(x2, cw * (c + 1)) - max(x1, cw * c))
            iy = max(0.0, min(y2, ch * (r + 1)) - max(y1, ch * r))
            if ix * iy >= 0.5 * cw * ch:
                chosen.append(run[r * cols + c])
    if not chosen:
        cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
        chosen = [run[int(cy // ch) * cols + int(cx // cw)]]
    return chosen


@pytest.fixture(scope="module", params=list(BACKENDS))
def lm(request, tiny_checkpoints, tmp_path_factory):
    from vrh_lmms.harness import lmms

    mp = pytest.MonkeyPatch()
    mp.setenv("VRH_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    name, extra = BACKENDS[request.param]
    model = lmms.build_model(name, f"pretrained={tiny_checkpoints(request.param)},dtype=float32{extra}")
    yield request.param, model
    mp.undo()


def discover(lm, mode: str, out, **spec):
    """One discovery on the haystack task in `mode`; the inputs each doc was forwarded with, by doc id."""
    inputs, current = {}, []
    real_forward, real_call = collector_mod.teacher_forced_inputs, collector_mod.SampleCollector.__call__

    def call(self, ctx, *args, **kwargs):  # lmms-eval orders docs its own way: key the inputs by doc id
        current.append(int(ctx.doc_id))
        return real_call(self, ctx, *args, **kwargs)

    def forward(*args, **kwargs):
        batch = real_forward(*args, **kwargs)
        inputs.setdefault(current[-1], batch)  # the first forward of the doc: its own query (not a null one)
        return batch

    mp = pytest.MonkeyPatch()
    mp.setattr(collector_mod, "teacher_forced_inputs", forward)
    mp.setattr(collector_mod.SampleCollector, "__call__", call)
    mp.setenv("VRH_HAYSTACK_CONFIG", json.dumps({**CONFIG, "mode": mode}))
    try:
        run_discovery(DiscoverySpec(model="x", model_args="pretrained=x", tasks=[TASK], output=str(out), limit=N,
                                    gen_kwargs="max_new_tokens=4", **spec), lm=lm)
    finally:
        mp.undo()
    return inputs


def expected_positions(family, lm, doc, batch) -> tuple[list[int], list[int]]:
    """(evidence positions, every image token) of a doc, from the fed ids alone."""
    ids = batch["input_ids"][0]
    token = lm.processor.image_token_id
    image_runs = runs(ids, token)
    assert len(image_runs) == len(doc["vrh_scenes"]), "one run of image tokens per image"
    k, ev = doc["vrh_needle_index"], doc["vrh_evidence"]
    media = [p for r in image_runs for p in r]
    if ev["kind"] == "image":
        return image_runs[k], media
    if family != "internvl":
        return qwen_box_positions(image_runs[k], batch["image_grid_thw"][k], doc["vrh_image_sizes"][k],
                                  ev["box"]), media
    from vrh_lmms.model.capture.layouts import box_key_mask
    from vrh_lmms.model.capture.multi_image import image_token_maps

    maps = image_token_maps(family, ids, doc["vrh_image_sizes"], lm.processor, batch, backend=lm)
    chosen = torch.nonzero(box_key_mask(maps[k], ev["box"], ids.numel())).flatten().tolist()
    assert set(chosen) <= set(image_runs[k]) and 0 < len(chosen) < len(image_runs[k])
    return chosen, media


def check_images_in_order(family, lm, doc, batch) -> None:
    """The backend gave the model the doc's images in order: per-image grids / tile counts as the processor's."""
    images = doc_to_visual(doc)
    ip = lm.processor.image_processor
    if family != "internvl":
        own = torch.cat([ip(images=[im], return_tensors="pt")["image_grid_thw"] for im in images])
        assert torch.equal(batch["image_grid_thw"].cpu(), own)
        return
    per_tile = lm.processor.image_seq_length
    kwargs = {"min_patches": lm.min_patches, "max_patches": lm.max_patches}
    own = [int(ip(images=[im], return_tensors="pt", **kwargs)["num_patches"][0]) * per_tile for im in images]
    assert [len(r) for r in runs(batch["input_ids"][0], lm.processor.image_token_id)] == own
    expect = torch.cat([ip(images=[im], return_tensors="pt", **kwargs)["pixel_values"] for im in images])
    torch.testing.assert_close(batch["pixel_values"].float().cpu(), expect.float(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("mode", ["locate", "which"])
def test_evidence_mass_equals_eager_attention(lm, mode, tmp_path):
    family, model = lm
    out = tmp_path / "heads.json"
    inputs = discover(model, mode, out)
    hf = load_heads_file(out)
    kind = "image_box" if mode == "locate" else "image"
    assert hf.scoring["evidence"] == kind
    assert "localization_heads" in hf.scoring["skipped_cells"]
    store = PartStore(sidecars(out)["parts"])
    keys = sorted(store.keys(), key=lambda k: int(k.rsplit("__", 1)[1]))
    assert len(keys) == N == len(inputs)
    masses = []
    for i, key in enumerate(keys):
        part, batch = store.read(key), inputs[i]
        doc = make_doc(i, {**CONFIG, "mode": mode, "scene": {}})
        assert len({tuple(s) for s in doc["vrh_image_sizes"]}) > 1, "the doc's images differ in size"
        check_images_in_order(family, model, doc, batch)
        evidence, media = expected_positions(family, model, doc, batch)
        assert part.meta["evidence"] == kind and part.meta["n_box_tokens"] == len(evidence)
        assert part.meta["n_image_tokens"] == len(media)
        prompt_len, n = part.meta["prompt_len"], part.meta["n_answer"]
        assert n >= 1
        attn = eager_attentions(model.model, batch)[0].double()
        expect = answer_rows_mass(attn, prompt_len, n, evidence)
        np.testing.assert_allclose(part.stats["out_sum"], expect, atol=2e-5)
        np.testing.assert_allclose(part.stats[IMAGE_MASS], answer_rows_mass(attn, prompt_len, n, media),
                                   atol=2e-5)
        masses.append(expect)
    np.testing.assert_allclose(hf.scores, np.mean(masses, axis=0), atol=2e-5)


def test_sweep_and_report_run_on_the_haystack(lm, tmp_path):
    from vrh_lmms.base.heads.plan import plan_configurations
    from vrh_lmms.report import ReportSettings, build_report
    from vrh_lmms.runs.sweep.run import SweepSpec, run_sweep

    family, model = lm
    if family != "qwen2_5_vl":
        pytest.skip("one family suffices for the sweep / report path")
    heads = tmp_path / "heads.json"
    discover(model, "locate", heads)
    mp = pytest.MonkeyPatch()
    mp.setenv("VRH_HAYSTACK_CONFIG", json.dumps({**CONFIG, "mode": "locate"}))
    try:
        spec = SweepSpec("vrh_qwen25", "pretrained=x", [TASK], str(heads), plan_configurations([1], 1, False, ["zero"]),
                         limit=N, gen_kwargs="max_new_tokens=4")
        sweep = run_sweep(spec, tmp_path / "sweep", lm=model, progress=False)
    finally:
        mp.undo()
    assert sorted(p.name for p in (sweep / "configs").iterdir()) == ["baseline", "random1_s0", "top1"]
    top1 = json.loads((sweep / "configs" / "top1" / "results.json").read_text())
    assert top1["vrh"]["ablation"]["heads"] == [str(load_heads_file(heads).ranking[0])]
    assert build_report([sweep], tmp_path / "report", ReportSettings(plots=False, n_resamples=200))
    text = (tmp_path / "report" / "report.md").read_text()
    assert TASK in text and "top1" in text


@pytest.mark.parametrize("bad, message", [
    ("index", r"^vrh_synth_haystack doc \d: vrh_evidence index 7 is out of range for 3 images \(vrh_image_sizes\)$"),
    ("sizes", r"^vrh_synth_haystack doc \d: image_box evidence needs vrh_image_sizes \[\[w, h\], \.\.\.\], one per "
              r"image$")])
def test_malformed_doc_is_one_clear_error(lm, bad, message, tmp_path, monkeypatch):
    from vrh_lmms.base.errors import VRHError
    from vrh_lmms.tasks.common import haystack

    family, model = lm
    real = haystack.make_doc

    def broken(i, cfg):
        d = real(i, cfg)
        if bad == "index":
            d["vrh_evidence"] = {**d["vrh_evidence"], "index": 7}
        else:
            del d["vrh_image_sizes"]
        return d

    monkeypatch.setattr(haystack, "make_doc", broken)
    with pytest.raises(VRHError, match=message):
        discover(model, "locate", tmp_path / "heads.json")
    assert not (tmp_path / "heads.json").exists()


def test_cli_discover_sweep_report_on_the_haystack(tiny_checkpoints, tmp_path, monkeypatch):
    """`vrh-lmms discover`, `sweep` and `report` on the `which` mode (image evidence, exact-match records); the
    haystack config is part of discovery's identity (another config does not reuse its answers)."""
    from vrh_lmms.cli import main

    monkeypatch.setenv("VRH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("VRH_HEADS_REGISTRY", str(tmp_path / "registry.json"))
    config = json.dumps({**CONFIG, "n": 3, "mode": "which"})
    monkeypatch.setenv("VRH_HAYSTACK_CONFIG", config)
    args = f"pretrained={tiny_checkpoints('qwen2_5_vl')},dtype=float32,min_pixels=3136,max_pixels=200704"
    heads = tmp_path / "d" / "heads.json"
    assert main(["discover", "--model", "vrh_qwen25", "--model_args", args, "--tasks", TASK,
                 "--gen-kwargs", "max_new_tokens=3", "--output", str(heads)]) == 0
    hf = load_heads_file(heads)
    assert hf.scoring["evidence"] == "image" and hf.extra["discovery_docs"][TASK]["doc_ids"] == [0, 1, 2]
    identity = json.loads((sidecars(heads)["parts"] / "identity.json").read_text())
    assert identity["data"] == {"VRH_HAYSTACK_CONFIG": config}
    out = tmp_path / "sweep"
    assert main(["sweep", "--model", "vrh_qwen25", "--model_args", args, "--heads-file", str(heads), "--tasks", TASK,
                 "--gen-kwargs", "max_new_tokens=3", "--k", "1", "--no-random", "--output", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "configs" / "top1" / f"samples_{TASK}.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(r["vrh_record"]["kind"] == "vqa" for r in rows)
    assert main(["report", str(out), "--output", str(tmp_path / "report")]) == 0
    md = (tmp_path / "report" / "report.md").read_text()
    assert TASK in md and "top1" in md


def test_null_query_control_runs_on_image_evidence(lm, tmp_path):
    """`--null-query` (the expression replaced by N/A) scores the same evidence on the content-free prompt."""
    family, model = lm
    if family != "qwen2_5_vl":
        pytest.skip("one family suffices for the control")
    out = tmp_path / "heads.json"
    discover(model, "locate", out, null_query=True)
    store = PartStore(sidecars(out)["parts"])
    for key in store.keys():
        part = store.read(key)
        assert part.meta["null_query"] is True
        assert np.isfinite(part.stats["null_out_sum"]).all() and (part.stats["null_out_sum"] > 0).all()
        assert not np.allclose(part.stats["null_out_sum"], part.stats["out_sum"])
