"""Fail fast and clean (issue 16): every check that needs no forward pass runs before the model loads, bad values
get one line naming them, and a run that fails before finishing any unit of work never blocks the corrected rerun.

The model load is replaced by a function that fails the test, so "before the model loads" is checked, not
assumed; the reruns then use a real tiny Qwen2.5-VL through lmms-eval.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import Geometry
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
from vrh_lmms.base.heads.plan import plan_configurations
from vrh_lmms.cli import main
from vrh_lmms.harness import lmms, preload
from vrh_lmms.runs.discovery.run import DiscoverySpec, run_discovery, sidecars
from vrh_lmms.runs.sweep.run import SweepSpec, run_sweep

torch.set_num_threads(1)
PIXELS = 224 * 224
TASK = "vrh_synth_grounding"
TINY = Geometry(2, 4, 2, 16)  # the tiny Qwen2.5-VL of conftest


def _heads(path: Path, geometry: Geometry = TINY) -> Path:
    scores = np.random.default_rng(1).random((geometry.layers, geometry.heads))
    return save_heads_file(HeadsFile({"id": "tiny", "family": "qwen2_5_vl"}, geometry, scores,
                                     ranking_from_scores(scores)), path)


def _args(tiny) -> str:
    return f"pretrained={tiny},dtype=float32,min_pixels={PIXELS},max_pixels={PIXELS}"


def _sweep(tiny, heads, ks=(1,), tasks=(TASK,), limit=2, model_args=None) -> SweepSpec:
    return SweepSpec(model="vrh_qwen25", model_args=model_args or _args(tiny), tasks=list(tasks),
                     heads_file=str(heads) if heads else None, limit=limit, gen_kwargs="max_new_tokens=6",
                     configurations=plan_configurations(list(ks), 1, False, ["zero"]))


def _discovery(tiny, out, tasks=(TASK,), limit=2, model_args=None) -> DiscoverySpec:
    return DiscoverySpec(model="vrh_qwen25", model_args=model_args or _args(tiny), tasks=list(tasks),
                         output=str(out), limit=limit, gen_kwargs="max_new_tokens=6")


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("VRH_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    mp.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 3, "seed": 4}))
    yield
    mp.undo()


@pytest.fixture(scope="module")
def lm(tiny_qwen25, synth):
    return lmms.build_model("vrh_qwen25", _args(tiny_qwen25))


@pytest.fixture
def no_model_load(monkeypatch):
    """Loading a model fails the test: what it guards must be decided before any weight is read."""

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the check")

    monkeypatch.setattr(lmms, "build_model", refuse)


# ------------------------------------------------------------------------------------ before the model loads
@pytest.mark.parametrize("command", ["sweep", "discover"])
def test_unknown_task_fails_in_seconds_before_the_model_loads(command, tiny_qwen25, tmp_path, no_model_load):
    heads = _heads(tmp_path / "heads.json")
    start = time.perf_counter()
    with pytest.raises(VRHError, match="task\\(s\\) not found: vrh_nosuch"):
        if command == "sweep":
            run_sweep(_sweep(tiny_qwen25, heads, tasks=[TASK, "vrh_nosuch"]), tmp_path / "out")
        else:
            run_discovery(_discovery(tiny_qwen25, tmp_path / "out" / "heads.json", tasks=["vrh_nosuch"]))
    seconds = time.perf_counter() - start
    print(f"{command}: unknown task refused after {seconds:.2f} s")
    assert seconds < 5, seconds  # a text search of the task YAMLs, not a task index or a model load
    assert not (tmp_path / "out").exists()  # and nothing was written


def test_task_names_are_searched_in_every_task_folder(tmp_path):
    lmms.check_task_names([TASK, "mmstar"])  # ours and lmms-eval's own
    with pytest.raises(VRHError, match="my_task"):
        lmms.check_task_names(["my_task"])
    (tmp_path / "my.yaml").write_text("task: my_task\n")
    lmms.check_task_names(["my_task"], include_path=str(tmp_path))


def test_k_beyond_the_heads_file_fails_before_the_baseline(tiny_qwen25, tmp_path, no_model_load):
    """`--k 9` on an 8-head model used to fail after the whole baseline had run."""
    heads = _heads(tmp_path / "heads.json")
    with pytest.raises(VRHError, match="configuration top9 .*asks for more heads than the heads file ranks \\(8\\)"):
        run_sweep(_sweep(tiny_qwen25, heads, ks=(1, 9)), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_geometry_from_config_json_refuses_a_heads_file_of_another_model(tiny_qwen25, tmp_path, no_model_load):
    other = _heads(tmp_path / "other.json", Geometry(2, 8, 2, 16))
    with pytest.raises(VRHError, match="made on geometry .*'heads': 8.* but the model has .*'heads': 4"):
        run_sweep(_sweep(tiny_qwen25, other), tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("arg, message", [
    ("heads=top1", "heads=top1 is not allowed in `vrh-lmms sweep` --model_args: each configuration sets its own"),
    ("heads_file=x.json", "pass the heads file as --heads-file"),
    ("ablation=mean", "use --ablation"),
])
def test_sweep_refuses_head_model_args(arg, message, tiny_qwen25, tmp_path, no_model_load):
    heads = _heads(tmp_path / "heads.json")
    with pytest.raises(VRHError, match=message.replace("(", "\\(").replace(")", "\\)")):
        run_sweep(_sweep(tiny_qwen25, heads, model_args=f"{_args(tiny_qwen25)},{arg}"), tmp_path / "out")


def test_discover_refuses_heads_before_loading(tiny_qwen25, tmp_path, no_model_load):
    with pytest.raises(VRHError, match="heads=top1 is not allowed .*discovery scores the intact model"):
        run_discovery(_discovery(tiny_qwen25, tmp_path / "h.json", model_args=f"{_args(tiny_qwen25)},heads=top1"))
    assert not sidecars(tmp_path / "h.json")["parts"].exists()


def _steer(tiny, heads, ks=(1,), tasks=(TASK,), model_args=None, controls=()):
    from vrh_lmms.runs.interventions.steer_run import SteerSpec, plan_steering

    return SteerSpec(model="vrh_qwen25", model_args=model_args or _args(tiny), tasks=list(tasks),
                     heads_file=str(heads),
                     configurations=plan_steering(plan_configurations(list(ks), 1, False, ["zero"], controls=controls),
                                                  [4.0]),
                     limit=2, gen_kwargs="max_new_tokens=6")


def _patch(tiny, heads, ks=(1,), tasks=(TASK,), model_args=None):
    from vrh_lmms.runs.interventions.patch_run import PatchSpec

    return PatchSpec(model="vrh_qwen25", model_args=model_args or _args(tiny), tasks=list(tasks),
                     heads_file=str(heads), ks=list(ks), random_seeds=1, limit=2, gen_kwargs="max_new_tokens=6")


@pytest.mark.parametrize("command", ["steer", "patch"])
def test_steer_and_patch_check_before_the_model_loads(command, tiny_qwen25, tmp_path, no_model_load):
    """The checks of sweeps, for the intervention commands: task names, head model args, k against the heads
    file, the image mass an image-matched set needs, the geometry config.json declares; nothing is written."""
    from vrh_lmms.runs.interventions.patch_run import run_patching
    from vrh_lmms.runs.interventions.steer_run import run_steering

    heads, out = _heads(tmp_path / "heads.json"), tmp_path / "out"
    run = run_steering if command == "steer" else run_patching
    make = _steer if command == "steer" else _patch
    with pytest.raises(VRHError, match="task\\(s\\) not found: vrh_nosuch"):
        run(make(tiny_qwen25, heads, tasks=[TASK, "vrh_nosuch"]), out)
    with pytest.raises(VRHError, match=f"heads=top1 is not allowed in `vrh-lmms {command}` --model_args: "
                                       f"{command} runs on the intact model"):
        run(make(tiny_qwen25, heads, model_args=f"{_args(tiny_qwen25)},heads=top1"), out)
    with pytest.raises(VRHError, match="configuration top9.* asks for more heads than the heads file ranks \\(8\\)"):
        run(make(tiny_qwen25, heads, ks=(1, 9)), out)
    with pytest.raises(VRHError, match="made on geometry .*'heads': 8.* but the model has .*'heads': 4"):
        run(make(tiny_qwen25, _heads(tmp_path / "other.json", Geometry(2, 8, 2, 16))), out)
    if command == "steer":
        with pytest.raises(VRHError, match="has no image_mass"):
            run(_steer(tiny_qwen25, heads, controls=["image-matched"]), out)
    else:
        with pytest.raises(VRHError, match="model arg batch_size: patching runs with batch_size 1"):
            run(_patch(tiny_qwen25, heads, model_args=f"{_args(tiny_qwen25)},batch_size=2"), out)
    assert not out.exists()


# ------------------------------------------------------------------------------------ one line per bad value
def test_unregistered_and_non_vrh_models_name_the_vrh_models():
    with pytest.raises(VRHError) as err:
        preload.check_model_name("vrh_nosuch")
    text = str(err.value)
    assert "'vrh_nosuch'" in text and "vrh_qwen25" in text and "vrh_internvl3_5" in text
    assert "aero" not in text and "whisper" not in text  # lmms-eval's unrelated model list is not repeated
    with pytest.raises(VRHError, match="'qwen2_5_vl' is lmms-eval's own backend.*vrh_qwen25"):
        preload.check_model_name("qwen2_5_vl")


def test_bad_checkpoint_paths_are_named(tmp_path, monkeypatch, tiny_qwen25):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "runs").mkdir()
    (tmp_path / "empty").mkdir()
    cases = {
        "/nonexistent": "pretrained=/nonexistent: no such folder; expected a checkpoint folder",
        "runs/tiny-qwn": "pretrained=runs/tiny-qwn: no such folder \\(runs/ exists here, but holds no tiny-qwn\\)",
        "./tiny": "pretrained=./tiny: no such folder",
        "empty": "pretrained=empty: the folder has no config.json",
    }
    for value, message in cases.items():
        with pytest.raises(VRHError, match=message):
            preload.check_pretrained(value)
    preload.check_pretrained(str(tiny_qwen25))  # a real checkpoint folder passes
    preload.check_pretrained("Org/Not-A-Cached-Model")  # a hub id: its config is fetched (or not) next
    with pytest.raises(VRHError, match="pretrained=Org/Not-A-Cached-Model: not a local folder, and its config.json "
                                       "cannot be fetched from the hub \\(HF_HUB_OFFLINE is set"):
        preload.load_config("Org/Not-A-Cached-Model")


def test_bad_model_path_is_one_line_from_the_cli(tmp_path, capsys):
    start = time.perf_counter()
    code = main(["sweep", "--model", "vrh_qwen25", "--model_args", "pretrained=/nonexistent", "--tasks", TASK,
                 "--k", "1", "--no-random", "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["vrh-lmms: error: pretrained=/nonexistent: no such folder; expected a checkpoint "
                                 "folder (with config.json) or a hub id such as Qwen/Qwen2.5-VL-7B-Instruct"]
    assert time.perf_counter() - start < 10 and not (tmp_path / "out").exists()


def test_bad_model_arg_entry_is_named():
    with pytest.raises(VRHError, match="entry 'dtype': expected KEY=VALUE"):
        preload.parse_model_args("pretrained=x,dtype")


# ------------------------------------------------------------------------------------ geometry from config.json
def test_config_geometry_matches_the_loaded_decoder_for_every_tiny_family(tiny_checkpoints):
    import transformers

    from vrh_lmms.base.families import family_for_config
    from vrh_lmms.model.backbone import locate_decoder
    from vrh_lmms.model.tiny.registry import TINY_FACTORIES

    for name in TINY_FACTORIES:
        path = tiny_checkpoints(name)
        config = preload.load_config(str(path))
        family = family_for_config(config)
        model = getattr(transformers, family.hf_class).from_pretrained(path)
        assert preload.config_geometry(config, family) == locate_decoder(model, family).geometry, name


def test_config_geometry_of_remote_code_families_from_their_raw_config():
    """Remote-code checkpoints have no transformers config class: their config.json is read as plain JSON
    (module trees and configs of test_adapters_remote, which follow the published remote code)."""
    from test_adapters_remote import deepseek_vl2, internvl_internlm2, internvl_qwen2, magma, phi4mm

    from vrh_lmms.base.families import family_for_config
    from vrh_lmms.model.backbone import locate_decoder

    for build in (internvl_internlm2, internvl_qwen2, phi4mm, lambda: deepseek_vl2(True),
                  lambda: deepseek_vl2(False), magma):
        root = build()
        family = family_for_config(root.config)
        raw = preload._namespace(json.loads(root.config.to_json_string()))
        assert preload.config_geometry(raw, family) == locate_decoder(root, family).geometry, family.name


def test_config_geometry_of_a_published_flat_qwen25_vl_config(tmp_path):
    """Qwen/Qwen2.5-VL-3B-Instruct's published config.json keeps the text fields at top level (no text_config):
    36 layers x 16 heads, 2 KV heads, hidden 2048 -> head_dim 128."""
    from vrh_lmms.base.families import get_family

    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl", "hidden_size": 2048,
        "intermediate_size": 11008, "num_attention_heads": 16, "num_hidden_layers": 36, "num_key_value_heads": 2,
        "vocab_size": 151936, "rope_scaling": {"mrope_section": [16, 24, 24], "rope_type": "default",
                                               "type": "default"},
        "vision_config": {"depth": 32, "hidden_size": 1280, "num_heads": 16, "out_hidden_size": 2048}}))
    geometry = preload.config_geometry(preload.load_config(str(tmp_path)), get_family("qwen2_5_vl"))
    assert geometry == Geometry(layers=36, heads=16, kv_heads=2, head_dim=128)


# ------------------------------------------------------------------------------------ reruns are never blocked
def test_failed_sweep_never_blocks_the_corrected_rerun(tiny_qwen25, tmp_path, lm, monkeypatch):
    out = tmp_path / "sweep"
    heads = _heads(tmp_path / "heads.json")
    with pytest.raises(VRHError, match="not found"):  # the case: a typo in --tasks
        run_sweep(_sweep(tiny_qwen25, heads, tasks=["vrh_nosuch"]), out)
    assert not out.exists()
    with pytest.raises(VRHError, match="geometry"):  # a heads file of another model
        run_sweep(_sweep(tiny_qwen25, _heads(tmp_path / "other.json", Geometry(2, 8, 2, 16))), out)
    assert not out.exists()

    def dies(*args, **kwargs):
        raise RuntimeError("out of memory while loading")

    monkeypatch.setattr(lmms, "build_model", dies)  # a failure after the folder was claimed
    with pytest.raises(RuntimeError):
        run_sweep(_sweep(tiny_qwen25, heads, limit=3), out)
    assert json.loads((out / "sweep.json").read_text())["identity"]["limit"] == 3
    monkeypatch.undo()
    run_sweep(_sweep(tiny_qwen25, heads, limit=2), out, lm=lm, progress=False)  # corrected: not "different sweep"
    assert sorted(p.parent.name for p in out.glob("configs/*/results.json")) == ["baseline", "random1_s0", "top1"]

    # Finished work is another matter: a different sweep is refused, and --force replaces only sweep files.
    with pytest.raises(VRHError, match="different sweep \\(limit differ\\) with 3 finished.*pass --force"):
        run_sweep(_sweep(tiny_qwen25, heads, limit=1), out, lm=lm)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(VRHError, match="notes.txt"):
        run_sweep(_sweep(tiny_qwen25, heads, limit=1), out, force=True, lm=lm)
    assert len(list(out.glob("configs/*/results.json"))) == 3 and (out / "notes.txt").exists()


def test_failed_discovery_never_blocks_the_corrected_rerun(tiny_qwen25, tmp_path, lm, monkeypatch):
    out = tmp_path / "heads.json"
    parts = sidecars(out)["parts"]
    with pytest.raises(VRHError, match="not found"):
        run_discovery(_discovery(tiny_qwen25, out, tasks=["vrh_nosuch"]))
    assert not parts.exists()

    def dies(*args, **kwargs):
        raise RuntimeError("out of memory while loading")

    monkeypatch.setattr(lmms, "build_model", dies)
    with pytest.raises(RuntimeError):
        run_discovery(_discovery(tiny_qwen25, out, limit=3))
    assert json.loads((parts / "identity.json").read_text())["limit"] == 3 and not list(parts.glob("*.npz"))
    monkeypatch.undo()
    assert run_discovery(_discovery(tiny_qwen25, out, limit=2), lm=lm) == out  # the .parts folder does not block
    assert len(list(parts.glob("*.npz"))) == 2
    assert json.loads((parts / "identity.json").read_text())["limit"] == 2


# ------------------------------------------------------------------------------------ smaller points
def test_sample_efficiency_k_is_never_clamped_silently(tmp_path, capsys):
    from vrh_lmms.runs.discovery.efficiency import choose_k

    assert choose_k(None, 8) == 1 and choose_k(None, 32) == 3 and choose_k(None, 28 * 28) == 20
    with pytest.raises(VRHError, match="--k 20: this model has 8 heads, so k must be between 1 and 1"):
        choose_k(20, 8)
    heads = _heads(tmp_path / "heads.json")
    assert main(["sample-efficiency", str(heads), "--k", "20", "--output", str(tmp_path / "eff")]) == 2
    assert "--k 20" in capsys.readouterr().err and not (tmp_path / "eff").exists()


def test_thread_choice(monkeypatch):
    from vrh_lmms.model import device

    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("VRH_THREADS", "3")
        assert device.choose_threads() == 3 and torch.get_num_threads() == 3
        monkeypatch.setenv("VRH_THREADS", "torch")
        assert device.choose_threads() is None
        monkeypatch.delenv("VRH_THREADS")
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert device.choose_threads() is None  # an explicit OpenMP setting is respected
        monkeypatch.delenv("OMP_NUM_THREADS")
        assert 1 <= device.choose_threads() <= device.usable_cores()
        monkeypatch.setenv("VRH_THREADS", "many")
        with pytest.raises(VRHError, match="VRH_THREADS='many'"):
            device.choose_threads()
    finally:
        torch.set_num_threads(before)


def test_free_cores_subtract_busy_ones(monkeypatch):
    from vrh_lmms.model import device

    monkeypatch.setattr(device, "usable_cores", lambda: 4)
    for busy, free in ((0.0, 4), (1.2, 3), (2.6, 1), (7.0, 1)):
        monkeypatch.setattr(device, "_busy_cores", lambda cores, b=busy: b)
        assert device.free_cores() == free


def test_resumed_sweep_keeps_listing_what_its_folder_holds(tiny_qwen25, tmp_path, lm, capsys):
    """A finished sweep rerun with fewer k resumes (same identity) and its sweep.json keeps listing the configurations
    of the first run, so the report sees one complete sweep rather than another sweep's results; a different heads
    file is refused naming it, and the folder is unchanged."""
    from vrh_lmms.cli import main

    out = tmp_path / "sweep"
    heads = _heads(tmp_path / "heads.json")
    run_sweep(_sweep(tiny_qwen25, heads, ks=(1, 2)), out, lm=lm, progress=False)
    first = json.loads((out / "sweep.json").read_text())["configurations"]
    run_sweep(_sweep(tiny_qwen25, heads, ks=(1,)), out, lm=lm, progress=False)
    listed = json.loads((out / "sweep.json").read_text())["configurations"]
    assert sorted(c["id"] for c in listed) == sorted(c["id"] for c in first) and len(first) == 5
    assert all(c["status"] == "done" for c in listed)
    other = _heads(tmp_path / "other.json")
    other.write_text(other.read_text().replace('"tiny"', '"tiny2"'))
    with pytest.raises(VRHError, match="different sweep \\(heads_file_sha256 differ\\) with 5 finished"):
        run_sweep(_sweep(tiny_qwen25, other, ks=(1,)), out, lm=lm)
    assert json.loads((out / "sweep.json").read_text())["heads_file"] == str(heads)
    assert main(["report", str(out), "--output", str(tmp_path / "report"), "--no-plots"]) == 0
    assert json.loads((tmp_path / "report" / "report.json").read_text())["complete"] is True


@pytest.mark.parametrize("bad, match", [([float("nan"), 1.0, 5.0, 5.0], "finite"),
                                        ([400.0, 400.0, 10.0, 10.0], "outside the"),
                                        ([2.0, 2.0, 0.0, 5.0], "zero or negative area")])
def test_a_bad_box_in_the_data_is_refused_before_the_folder_and_the_model(bad, match, tiny_qwen25, tmp_path, vrh_env,
                                                                         no_model_load):
    """RefCOCO-schema rows (COCO x, y, w, h `bbox`) where one doc's box is NaN, outside its image or of no area:
    discovery names the task, the doc and the field in one line, before it claims its output or loads weights."""
    import datasets

    from vrh_lmms.base.synth.layouts import hub_rows
    from vrh_lmms.base.synth.scenes import generate_scenes

    rows = hub_rows(generate_scenes(3, seed=1))
    rows[1]["bbox"] = bad
    data = tmp_path / "data"
    data.mkdir()
    datasets.Dataset.from_list(rows).cast_column("image", datasets.Image()).to_parquet(str(data / "val.parquet"))
    vrh_env.setenv("VRH_REFCOCO_DATA", str(data))
    out = tmp_path / "out" / "heads.json"
    with pytest.raises(VRHError, match=f"vrh_refcoco_val doc 1: field .*{match}") as err:
        run_discovery(_discovery(tiny_qwen25, out, tasks=("vrh_refcoco_val",), limit=3))
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()  # nothing claimed, nothing written


@pytest.mark.parametrize("command", ["steer", "patch"])
def test_steer_and_patch_refuse_a_bad_box_before_the_folder_and_the_model(command, tiny_qwen25, tmp_path, vrh_env,
                                                                          no_model_load):
    import datasets

    from vrh_lmms.base.synth.layouts import hub_rows
    from vrh_lmms.base.synth.scenes import generate_scenes
    from vrh_lmms.runs.interventions.patch_run import run_patching
    from vrh_lmms.runs.interventions.steer_run import run_steering

    rows = hub_rows(generate_scenes(3, seed=1))
    rows[1]["bbox"] = [1.0, 1.0, float("inf"), 4.0]
    data = tmp_path / "data"
    data.mkdir()
    datasets.Dataset.from_list(rows).cast_column("image", datasets.Image()).to_parquet(str(data / "val.parquet"))
    vrh_env.setenv("VRH_REFCOCO_DATA", str(data))
    heads, out = _heads(tmp_path / "heads.json"), tmp_path / "out"
    spec = (_steer if command == "steer" else _patch)(tiny_qwen25, heads, tasks=["vrh_refcoco_val"])
    with pytest.raises(VRHError, match="vrh_refcoco_val doc 1: field .*finite"):
        (run_steering if command == "steer" else run_patching)(spec, out)
    assert not out.exists()


def test_maps_and_the_locator_check_the_boxes_of_the_docs_they_read_before_the_model(tiny_qwen25, tmp_path, vrh_env,
                                                                                   no_model_load):
    import datasets

    from vrh_lmms.base.synth.layouts import hub_rows
    from vrh_lmms.base.synth.scenes import generate_scenes
    from vrh_lmms.runs.maps.setup import prepare

    rows = hub_rows(generate_scenes(3, seed=1))
    rows[1]["bbox"] = [1.0, 1.0, 0.0, 4.0]
    data = tmp_path / "data"
    data.mkdir()
    datasets.Dataset.from_list(rows).cast_column("image", datasets.Image()).to_parquet(str(data / "val.parquet"))
    vrh_env.setenv("VRH_REFCOCO_DATA", str(data))
    heads = _heads(tmp_path / "heads.json")
    args = ("vrh_qwen25", _args(tiny_qwen25), "vrh_refcoco_val", str(heads))
    for chosen in ({"limit": 3}, {"doc_ids": [1]}):
        with pytest.raises(VRHError, match="vrh_refcoco_val doc 1: field .*zero or negative area"):
            prepare(*args, **chosen)
    with pytest.raises(AssertionError, match="the model was loaded"):  # docs 0 and 2 are fine: the model loads next
        prepare(*args, doc_ids=[0, 2])
