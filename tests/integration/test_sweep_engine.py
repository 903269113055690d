"""The fast sweep engine writes the files of the reference engine (`--engine lmms`, a plain lmms-eval evaluator pass
per configuration): on a tiny Qwen2.5-VL (float32, CPU, left-padded batches of 2) and on every task family we ship
(grounding, VQA, a text needle, several images per doc), every results.json field (times and dates aside) and every
samples line are equal, while the fast engine built each task once and reused the processor's outputs."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch

from vrh_lmms.base import gc_startup
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
from vrh_lmms.base.heads.plan import plan_configurations
from vrh_lmms.harness import lmms
from vrh_lmms.harness import sweep_engine as engine
from vrh_lmms.model import packing
from vrh_lmms.runs.sweep.run import SweepSpec, run_sweep

QWEN_PIXELS = 28 * 28 * 16
# task -> (data environment variable, its value, max_new_tokens): one task per family of tasks we ship
TASKS = {
    "vrh_synth_grounding": ("VRH_SYNTH_CONFIG", {"n": 4, "seed": 3}, 10),
    "vrh_synth_vqa": ("VRH_SYNTH_CONFIG", {"n": 8, "seed": 5}, 6),
    "vrh_synth_text_needle": ("VRH_NEEDLE_CONFIG", {"n": 4, "seed": 1, "pairs": 4}, 6),
    "vrh_synth_haystack": ("VRH_HAYSTACK_CONFIG", {"n": 3, "seed": 2, "n_images": 2, "sizes": [56]}, 8),
}
# differ between any two runs: top-level times and dates, the throughput block's timings
TIMES = ("date", "start_time", "end_time", "total_evaluation_time_seconds")
THROUGHPUT_TIMES = ("avg_speed", "total_elapsed_time")


def run_files(folder: Path) -> tuple[dict, dict[str, list[str]]]:
    """results.json without its times, and every samples file's lines (as written)."""
    results = json.loads((folder / "results.json").read_text())
    for key in TIMES:
        results.pop(key, None)
    for key in THROUGHPUT_TIMES:
        results.get("throughput", {}).pop(key, None)
    samples = {p.name: p.read_text().splitlines() for p in sorted(folder.glob("samples_*.jsonl"))}
    return results, samples


def tiny_model_and_heads(tiny_or_skip, folder: Path, batch_size: int = 1):
    """A tiny Qwen2.5-VL (float32), its model args, and a heads file of random scores for it."""
    ckpt = tiny_or_skip("qwen2_5_vl")
    model_args = f"pretrained={ckpt},dtype=float32,min_pixels={QWEN_PIXELS},max_pixels={QWEN_PIXELS}"
    lm = lmms.build_model("vrh_qwen25", model_args, batch_size=batch_size)
    g = lm.vrh_decoder.geometry
    scores = np.random.default_rng(2).random((g.layers, g.heads))
    heads = folder / "heads.json"
    save_heads_file(HeadsFile({"id": str(ckpt), "family": "qwen2_5_vl"}, g, scores, ranking_from_scores(scores)),
                    heads)
    return lm, model_args, heads


@pytest.mark.parametrize("task,window", [(t, None) for t in sorted(TASKS)] + [("vrh_synth_grounding", 1)])
def test_fast_engine_writes_the_reference_files(task, window, tiny_or_skip, vrh_env, tmp_path):
    """`window`: the bytes of inputs recorded calls may hold before they run (1: each runs as it is recorded)."""
    if window is not None:
        vrh_env.setattr(packing, "COLLECT_BYTES", window)
    variable, value, max_new = TASKS[task]
    vrh_env.setenv(variable, json.dumps(value))
    lm, model_args, heads = tiny_model_and_heads(tiny_or_skip, tmp_path, batch_size=2)
    configs = plan_configurations([2], 2, False, ["zero"])  # baseline, top2, random2_s0, random2_s1: one pack

    def sweep(name: str) -> Path:
        spec = SweepSpec("vrh_qwen25", model_args, [task], str(heads), configs, batch_size=2,
                         gen_kwargs=f"max_new_tokens={max_new}", engine=name)
        return run_sweep(spec, tmp_path / name, lm=lm, progress=False)

    decodes = []  # every image the dataset decodes (a doc read from the dataset decodes its images)
    decode = datasets.features.Image.decode_example
    vrh_env.setattr(datasets.features.Image, "decode_example", lambda *a, **k: decodes.append(1) or decode(*a, **k))
    from lmms_eval import evaluator

    scorers = []  # the threads lmms-eval scores each evaluator pass's docs with
    thread_map = evaluator._thread_map_ordered
    vrh_env.setattr(evaluator, "_thread_map_ordered",
                    lambda f, items, max_workers, on_complete=None: scorers.append(max_workers)
                    or thread_map(f, items, max_workers, on_complete))
    templates = []  # every chat template the processor renders
    render = type(lm.processor).apply_chat_template
    vrh_env.setattr(type(lm.processor), "apply_chat_template",
                    lambda *a, **k: templates.append(1) or render(*a, **k))
    reference = sweep("lmms")
    decoded_by_reference = len(decodes)
    rendered_by_reference = len(templates)
    assert scorers == [4] * len(configs), "the reference engine scores as lmms-eval does by default"
    built, kept, collector = [], [], []
    from lmms_eval import evaluator

    original_get, original_memo = evaluator.get_task_dict, engine.InputsOnce.__call__

    def counting_get(*args, **kwargs):
        built.append(args[0])
        collector.append((gc.isenabled(), gc.get_freeze_count() > 0))
        return original_get(*args, **kwargs)

    def counting_memo(self, *args, **kwargs):
        out = original_memo(self, *args, **kwargs)
        kept.append(self.hits)
        return out

    packs = []
    original_pack = lm.vrh_pack

    def keeping_pack(*args, **kwargs):
        packs.append(original_pack(*args, **kwargs))
        return packs[-1]

    from lmms_eval.tasks import TaskManager

    managers = []  # every TaskManager the sweep builds (each indexes the task YAMLs it sees)
    index = TaskManager.__init__
    vrh_env.setattr(TaskManager, "__init__", lambda self, *a, **k: managers.append(k) or index(self, *a, **k))
    evaluator.get_task_dict = counting_get
    engine.InputsOnce.__call__ = counting_memo
    lm.vrh_pack = keeping_pack
    try:
        with gc_startup.paused():  # as the sweep command runs it
            fast = sweep("fast")
    finally:
        evaluator.get_task_dict, engine.InputsOnce.__call__ = original_get, original_memo
        del lm.vrh_pack
    rows = packs[0].stats.rows
    if window is None:
        assert max(rows) > 2 * len(configs), "several calls' rows stacked in one generate"
    else:
        assert max(rows) == 2 * len(configs) and len(rows) == 2, "each call run on its own as it is recorded"
    assert len(built) == 1, "the fast engine builds the task once for all four configurations"
    assert len(managers) == 1 and managers[0].get("include_defaults") is False, \
        "one TaskManager per sweep (checks and passes), indexing only our task folder when it holds every task"
    assert collector == [(True, True)], "collection back on, start-up's objects frozen, once the model has loaded"
    decoded = len(decodes) - decoded_by_reference
    # the synthetic grounding and VQA docs hold their images in an image column; the needle has none, the haystack
    # redraws its scenes
    assert (decoded > 0) == (decoded_by_reference > 0) == (task in ("vrh_synth_grounding", "vrh_synth_vqa"))
    assert decoded * len(configs) <= decoded_by_reference, \
        "each doc decoded once per sweep (for the backend and every pass's scoring), not once per configuration"
    assert kept and kept[-1] >= 3 * (len(kept) // 4), "the three later passes of the pack reuse the inputs"
    assert scorers[len(configs):] == [1] * len(configs), "our tasks' docs scored in one thread (the dry pass: none)"
    rendered = len(templates) - rendered_by_reference
    assert rendered_by_reference > 0 and rendered * len(configs) == rendered_by_reference, \
        "chat templates rendered by the dry pass only, replayed to every configuration's pass"
    for cfg in configs:
        want, got = run_files(reference / "configs" / cfg.id), run_files(fast / "configs" / cfg.id)
        assert sorted(want[0]) == sorted(got[0]), cfg.id
        for key in want[0]:
            assert got[0][key] == want[0][key], (cfg.id, key)
        assert got[1] == want[1], cfg.id
    answers = {cfg.id: [json.loads(line)["resps"] for line in run_files(fast / "configs" / cfg.id)[1][
        f"samples_{task}.jsonl"]] for cfg in configs}
    assert len({json.dumps(a) for a in answers.values()}) > 1 or task == "vrh_synth_text_needle", \
        "the head sets must change some answers"


def test_the_dry_pass_scores_nothing(tiny_or_skip, vrh_env, tmp_path):
    """The dry pass before a pack's passes only records the model calls its docs make: no doc is scored on its
    empty answer (a judge-scored task pays a judge call per scored doc). Each configuration's pass scores each doc
    once, and the files are those of the reference engine (above)."""
    from lmms_eval.api.task import ConfigurableTask

    n = 3
    vrh_env.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": n, "seed": 3}))
    lm, model_args, heads = tiny_model_and_heads(tiny_or_skip, tmp_path)
    configs = plan_configurations([2], 2, False, ["zero"])  # one pack of four
    scored = []
    process_results = ConfigurableTask.process_results
    vrh_env.setattr(ConfigurableTask, "process_results",
                    lambda self, *a, **k: scored.append(a[0]) or process_results(self, *a, **k))
    spec = SweepSpec("vrh_qwen25", model_args, ["vrh_synth_grounding"], str(heads), configs,
                     gen_kwargs="max_new_tokens=4", engine="fast")
    packs = []
    pack = lm.vrh_pack
    vrh_env.setattr(lm, "vrh_pack", lambda *a, **k: packs.append(pack(*a, **k)) or packs[-1], raising=False)
    out = run_sweep(spec, tmp_path / "fast", lm=lm, progress=False)
    assert len(scored) == n * len(configs), "each configuration's pass scores each doc once; the dry pass none"
    assert sum(packs[0].stats.rows) == n * len(configs), "the dry pass recorded every doc's call, for every config"
    assert all((out / "configs" / c.id / "results.json").is_file() for c in configs)


def test_a_cache_budget_that_forces_evictions_changes_no_answer(tiny_or_skip, vrh_env, tmp_path):
    """`VRH_SWEEP_CACHE`: with a budget too small for the docs and the processor's outputs (nothing kept, or some),
    what does not fit is decoded and processed again where it is read, and every file equals the reference
    engine's."""
    n = 4
    vrh_env.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": n, "seed": 3}))
    lm, model_args, heads = tiny_model_and_heads(tiny_or_skip, tmp_path, batch_size=2)
    configs = plan_configurations([2], 2, False, ["zero"])
    decodes = []
    decode = datasets.features.Image.decode_example
    vrh_env.setattr(datasets.features.Image, "decode_example", lambda *a, **k: decodes.append(1) or decode(*a, **k))
    budgets = []
    budget_class = engine.CacheBudget
    vrh_env.setattr(engine, "CacheBudget", lambda *a: budgets.append(budget_class(*a)) or budgets[-1])

    def sweep(name: str, folder: str) -> Path:
        spec = SweepSpec("vrh_qwen25", model_args, ["vrh_synth_grounding"], str(heads), configs, batch_size=2,
                         gen_kwargs="max_new_tokens=10", engine=name)
        return run_sweep(spec, tmp_path / folder, lm=lm, progress=False)

    reference = sweep("lmms", "lmms")
    decoded = {}
    for budget in ("4G", "0", "200K"):  # everything kept (the default), nothing, some (an image: 150 KB decoded)
        vrh_env.setenv("VRH_SWEEP_CACHE", budget)
        before = len(decodes)
        fast = sweep("fast", f"fast_{budget}")
        decoded[budget] = len(decodes) - before
        assert budgets[-1].limit == engine.cache_bytes(budget)
        assert budgets[-1].used <= budgets[-1].limit, "what is kept after the sweep fits the budget"
        assert (budgets[-1].refused > 0) == (budget != "4G"), "the small budgets refused to keep something"
        for cfg in configs:
            assert run_files(fast / "configs" / cfg.id) == run_files(reference / "configs" / cfg.id), (budget, cfg)
    assert decoded["0"] > decoded["200K"] > decoded["4G"], "docs that do not fit are decoded again where read"


def test_decoded_docs_are_kept_within_the_byte_budget():
    from PIL import Image

    decoded = []

    class Split(list):
        def __getitem__(self, index):
            decoded.append(index)
            return {"image": Image.new("RGB", (100, 100)), "id": index}

    budget = engine.CacheBudget(2 * engine.value_bytes({"image": Image.new("RGB", (100, 100)), "id": 0}))
    rows = engine._Rows(Split(range(5)), budget)
    first = [rows[i] for i in range(5)]
    again = list(rows)
    assert [a is b for a, b in zip(first, again)] == [True, True, False, False, False]
    assert decoded == [0, 1, 2, 3, 4, 2, 3, 4] and budget.used == budget.limit
    assert engine.value_bytes(first[0]) >= 100 * 100 * 3, "an image counts by its decoded pixels"


@pytest.mark.parametrize("value,size", [("4G", 4 << 30), ("512M", 512 << 20), ("1.5GiB", 3 << 29), ("0", 0),
                                        ("123", 123), ("", engine.DEFAULT_CACHE_BYTES)])
def test_cache_budget_sizes(value, size):
    assert engine.cache_bytes(value) == size


def test_a_bad_cache_budget_is_one_line_before_the_model_loads(tmp_path, vrh_env):
    vrh_env.setenv("VRH_SWEEP_CACHE", "lots")
    spec = SweepSpec("vrh_qwen25", "pretrained=/nonexistent", ["vrh_synth_grounding"], None,
                     plan_configurations([1], 0, False, ["zero"]))
    with pytest.raises(VRHError, match=r"^VRH_SWEEP_CACHE='lots': expected a size in bytes such as 4G, 512M or 0$"):
        run_sweep(spec, tmp_path / "out", progress=False)


def test_unknown_engine_is_one_line_before_the_model_loads(tmp_path):
    spec = SweepSpec("vrh_qwen25", "pretrained=/nonexistent", ["vrh_synth_grounding"], None,
                     plan_configurations([1], 0, False, ["zero"]), engine="turbo")
    with pytest.raises(VRHError, match="--engine 'turbo': use fast or lmms"):
        run_sweep(spec, tmp_path / "out", progress=False)


def test_inputs_once_hands_back_equal_calls_only():
    from PIL import Image

    calls = []

    class Processor:
        tokenizer = "tok"

        def __call__(self, text, images=None):
            calls.append(text)
            return {"ids": torch.tensor([ord(c) for c in text]), "n": len(images or [])}

    memo = engine.InputsOnce(Processor())
    red, blue = Image.new("RGB", (4, 4), "red"), Image.new("RGB", (4, 4), "blue")
    first = memo(["a"], images=[red])
    assert memo(["a"], images=[red.copy()]) is first  # same content, another object: kept
    assert memo(["a"], images=[blue]) is not first  # same text and size, other pixels: run again
    assert memo(["b"], images=[red]) is not first
    assert calls == [["a"], ["a"], ["b"]] and memo.tokenizer == "tok" and (memo.hits, memo.misses) == (1, 3)
    small = engine.InputsOnce(Processor(), budget=0)  # nothing fits: every call runs the processor
    small(["a"]), small(["a"])
    assert small.hits == 0


def test_a_pass_with_the_same_requests_replays_the_recorded_calls(monkeypatch):
    """`InputsOnce.begin(key)`: a later `generate_until` with the same requests gets the recorded processor outputs and
    templates back without reading pixels; a call that differs from its record ends the replay."""
    from PIL import Image

    calls, templates, read = [], [], []

    class Processor:
        def __call__(self, text, images=None):
            calls.append(text)
            return {"ids": torch.tensor([ord(c) for c in text[0]])}

        def apply_chat_template(self, messages):
            templates.append(messages)
            return [m["text"] + "!" for m in messages]

    tobytes = Image.Image.tobytes
    monkeypatch.setattr(Image.Image, "tobytes", lambda self, *a, **k: read.append(1) or tobytes(self, *a, **k))
    memo = engine.InputsOnce(Processor())
    red = Image.new("RGB", (4, 4), "red")

    def backend_pass(key, text="a"):
        memo.begin(key)
        texts = memo.apply_chat_template([{"text": text}])
        out = memo(texts, images=[red])
        memo.end()
        return texts, out

    first = backend_pass(("doc 0",))
    assert (len(calls), len(templates)) == (1, 1) and read
    read.clear()
    again = backend_pass(("doc 0",))
    assert again[0] == first[0] and again[1] is first[1]
    assert (len(calls), len(templates), len(read), memo.replayed) == (1, 1, 0, 2), "replayed, no pixel read"
    other = backend_pass(("doc 1",), text="b")  # other requests: computed, recorded under their own key
    assert other[0] == ["b!"] and (len(calls), len(templates)) == (2, 2)
    diverged = backend_pass(("doc 0",), text="c")  # same requests, other text: the record is not used
    assert diverged[0] == ["c!"] and (len(calls), len(templates)) == (3, 3)


def test_doc_callables_answer_once_per_doc_object():
    """`InputsOnce.docs_once`: the task's doc_to_messages runs once per doc object per sweep; another object for the
    same slot (a doc decoded again) runs it again."""
    from lmms_eval.api.instance import Instance

    seen = []

    def doc_to_messages(doc):
        seen.append(doc["id"])
        return [{"role": "user", "content": [{"type": "text", "text": doc["q"]}]}]

    docs = [{"id": 0, "q": "where?"}, {"id": 1, "q": "what?"}]
    requests = [Instance("generate_until", ("ctx", doc_to_messages, {"max_new_tokens": 4}, i, "t", "test"), i,
                         {"task": "t", "doc_id": i, "repeats": 1}) for i in range(len(docs))]
    memo = engine.InputsOnce(object())
    key = engine.request_key(requests)
    assert key is not None and key == engine.request_key(requests)
    answers = []
    for _ in range(3):  # the dry pass records, two passes replay
        memo.begin(key)
        answers.append([r.args[1](d) for r, d in zip(memo.docs_once(requests), docs)])
        memo.end()
    assert seen == [0, 1] and answers[0] == answers[1] == answers[2]
    assert requests[0].args[1] is doc_to_messages, "the evaluator's own requests are left as they are"
    memo.begin(key)
    memo.docs_once(requests)[0].args[1](dict(docs[0]))  # an equal doc, another object: asked again
    memo.end()
    assert seen == [0, 1, 0]


def test_own_tasks_are_those_of_our_task_folder(tmp_path):
    """Only tasks whose YAML lies in our task folder are scored in the calling thread; lmms-eval's own or a user's
    (whose scoring may wait on a network judge) keep lmms-eval's scoring threads."""
    from types import SimpleNamespace

    from vrh_lmms.base.paths import tasks_path

    tm = SimpleNamespace(task_index={"ours": {"yaml_path": str(tasks_path() / "synth" / "grounding.yaml")},
                                     "theirs": {"yaml_path": str(tmp_path / "theirs.yaml")},
                                     "python_task": {"yaml_path": -1}})
    assert lmms.own_tasks(tm, ["ours"])
    assert not lmms.own_tasks(tm, ["ours", "theirs"])
    assert not lmms.own_tasks(tm, ["python_task"]) and not lmms.own_tasks(tm, ["unknown"])


@pytest.mark.parametrize("family,model,attr", [("llava_next", "vrh_llava_next", "_image_processor"),
                                               ("idefics3", "vrh_idefics3", "_processor")])
def test_backends_keeping_their_processor_elsewhere_process_each_doc_once(family, model, attr, tiny_or_skip, vrh_env,
                                                                           tmp_path):
    """lmms-eval's llava_hf (LLaVA-1.5, -NeXT, -OneVision) keeps its processor as `_image_processor`, idefics2
    (Idefics3, SmolVLM) as `_processor`: the fast engine reuses their outputs too, so a pack of four configurations
    runs the processor once per doc (the dry pass), not once per configuration, and writes the reference files."""
    n = 3
    vrh_env.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": n, "seed": 3, "scene": {"image_size": 168}}))
    ckpt = tiny_or_skip(family)
    model_args = f"pretrained={ckpt},dtype=float32"
    lm = lmms.build_model(model, model_args)
    processor = getattr(lm, attr)
    calls = []
    original = type(processor).__call__
    vrh_env.setattr(type(processor), "__call__", lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    g = lm.vrh_decoder.geometry
    scores = np.random.default_rng(2).random((g.layers, g.heads))
    heads = tmp_path / "heads.json"
    save_heads_file(HeadsFile({"id": str(ckpt), "family": family}, g, scores, ranking_from_scores(scores)), heads)
    configs = plan_configurations([2], 2, False, ["zero"])  # baseline, top2, random2_s0, random2_s1: one pack

    def sweep(name: str) -> tuple[Path, int]:
        before = len(calls)
        spec = SweepSpec(model, model_args, ["vrh_synth_grounding"], str(heads), configs,
                         gen_kwargs="max_new_tokens=6", engine=name)
        return run_sweep(spec, tmp_path / name, lm=lm, progress=False), len(calls) - before

    reference, by_reference = sweep("lmms")
    fast, by_fast = sweep("fast")
    assert by_reference == n * len(configs), by_reference  # lmms-eval's engine: every doc in every configuration
    assert by_fast == n, by_fast
    assert getattr(lm, attr) is processor, "the backend's own processor is back after the sweep"
    for cfg in configs:
        assert run_files(reference / "configs" / cfg.id) == run_files(fast / "configs" / cfg.id), cfg.id
