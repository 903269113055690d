"""`vrh-lmms demo --pretrained DIR` on a checkpoint of any registered family, not only `vrh-lmms train-tiny`'s.

End to end on tiny LLaVA-1.5 and Gemma 3 checkpoints (`vrh-lmms make-tiny`): the demo runs discovery, the sweep and
the report through the family's own `vrh_*` model, on default scenes sized for the checkpoint's processor, and its
console, demo_summary.md/json and report name the model and family that ran; the recall step, built on the shipped
text backbone, is skipped with a line saying why. Refused in one line before anything is written or loaded: the
steps built on the demo's own models (--transfer, --applications), a folder that is not a checkpoint, a model type
neither a family nor transformers knows, a type only vrh_hf runs (no image-token layout, so no discovery) and one
whose heads cannot be cut.
"""

from __future__ import annotations

import json
import re

import pytest
from support.demo_runs import run_demo_cli

from vrh_lmms.base.paths import shown_model
from vrh_lmms.cli import main


@pytest.mark.slow
@pytest.mark.parametrize("family,model_id", [("llava", "vrh_llava"), ("gemma3", "vrh_gemma3")])
def test_demo_runs_a_tiny_checkpoint_of_another_family(family, model_id, tiny_checkpoints, tmp_path):
    ckpt = tiny_checkpoints(family)
    out = tmp_path / "demo"
    proc = run_demo_cli(out, "--pretrained", str(ckpt), "--n-discovery", "3", "--n-eval", "6", "--random-seeds", "2")
    steps, closing = (" ".join(text.split()) for text in (proc.stderr, proc.stdout))  # rich wraps long lines
    assert f"model: {ckpt} through {model_id} (family {family})" in steps, steps
    assert "skipped: the recall step" in steps and "[1/3] discovery on 3" in steps and "[3/3] report" in steps
    assert f"Model: {ckpt} through {model_id} (family {family})" in closing, closing
    summary = json.loads((out / "demo_summary.json").read_text())
    assert (summary["model_id"], summary["family"], summary["design_targets"]) == (model_id, family, False)
    assert summary["scenes"]["image_size"] == 112  # the tiny processors' crop / resize
    assert summary["acceptance"]["n_eval"] == 6 and summary["acceptance"]["rows"] and "recall" not in summary
    markdown = (out / "demo_summary.md").read_text()
    lines = markdown.splitlines()
    assert lines[0].startswith("**Ablating the discovered top-k heads")  # the verdict first
    shown = shown_model(str(ckpt))  # the files name no absolute path
    assert lines[2].startswith(f"Model: `{shown}` through `{model_id}` (family {family})"), lines[2]
    assert "| k (share of heads) |" in markdown and "Design targets" not in markdown
    heads = json.loads((out / "heads.json").read_text())
    assert heads["model"]["family"] == family
    run = json.loads((out / "sweep" / "configs" / "baseline" / "results.json").read_text())
    assert run["vrh"]["family"] == family
    report = (out / "report" / "report.md").read_text()
    assert re.search(rf"\| {ckpt.name} \| vrh_synth_grounding \| baseline \| 6 \|", report), report[:2000]
    html = (out / "report" / "report.html").read_text()
    assert f"<code>{model_id}</code> (family {family})" in html
    assert (out / "kcurve.png").stat().st_size > 0 and (out / "report" / "explorer.html").is_file()


@pytest.mark.slow
def test_demo_on_a_hybrid_decoder_counts_its_attention_heads_and_turns_thinking_off(tiny_checkpoints, tmp_path):
    """Qwen3.5's tiny decoder has heads in 2 of its 4 layers (8 heads): the shares of k are of those 8, the heads file
    ranks only them, and the backend runs with thinking off (else the answer waits behind a `<think>` block)."""
    ckpt = tiny_checkpoints("qwen3_5")
    out = tmp_path / "demo"
    proc = run_demo_cli(out, "--pretrained", str(ckpt), "--n-discovery", "3", "--n-eval", "6", "--random-seeds", "2")
    assert re.search(r"^ *1 \(12%\) ", proc.stdout, re.M), proc.stdout  # k = 1 of 8 heads, not of 16
    heads = json.loads((out / "heads.json").read_text())
    assert heads["geometry"]["head_layers"] == [1, 3]
    assert {h[:2] for h in heads["ranking"]} == {"L1", "L3"}
    assert "enable_thinking=False" in json.loads((out / "sweep" / "sweep.json").read_text())["identity"]["model_args"]
    assert "| 1 (12%) |" in (out / "demo_summary.md").read_text()


def _refused(argv: list[str], capsys) -> str:
    capsys.readouterr()  # what building the checkpoints printed
    assert main(["demo", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("step", [["--transfer"], ["--transfer", "other"], ["--applications"]])
def test_steps_built_on_the_demo_models_are_refused_before_any_load(step, tiny_checkpoints, tmp_path, capsys,
                                                                     monkeypatch):
    from vrh_lmms.harness import lmms

    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(lmms, "build_model", no_load)
    out = tmp_path / "demo"
    err = _refused(["--pretrained", str(tiny_checkpoints("gemma3")), "--output", str(out), *step], capsys)
    assert f"{step[0]}: steps built on the demo's own Qwen2.5-VL models" in err and "gemma3 checkpoint" in err
    assert not out.exists()


def _checkpoint(folder, config: dict):
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_bad_checkpoints_are_refused_in_one_line(tiny_checkpoints, tmp_path, capsys):
    from transformers import AutoConfig

    out = tmp_path / "demo"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "empty" in _refused(["--pretrained", str(empty), "--output", str(out)], capsys)
    unknown = _checkpoint(tmp_path / "unknown", {"model_type": "no_such_vlm"})
    err = _refused(["--pretrained", str(unknown), "--output", str(out)], capsys)
    assert "model_type 'no_such_vlm' is claimed by no vrh-lmms family and transformers cannot build it" in err
    cross = tmp_path / "cross"
    AutoConfig.for_model("mllama").save_pretrained(cross)  # the image read through cross-attention: config.json only
    err = _refused(["--pretrained", str(cross), "--output", str(out)], capsys)
    assert "(mllama, " in err and "vrh_hf cannot cut its heads" in err and "cross-attention" in err
    assert not out.exists()


def test_a_type_only_vrh_hf_runs_is_refused_naming_the_missing_layout(tiny_checkpoints, tmp_path, capsys):
    from support.tiny_generic import build

    vipllava = build(tmp_path / "vipllava", tiny_checkpoints("llava"))
    out = tmp_path / "demo"
    err = _refused(["--pretrained", str(vipllava), "--output", str(out)], capsys)
    assert "(vipllava): the demo starts with discovery" in err and "image-token layout" in err
    assert not out.exists()


@pytest.mark.parametrize("processor,size", [
    ({"image_processor": {"crop_size": {"height": 336, "width": 336}, "size": {"shortest_edge": 336}}}, 336),
    ({"size": {"height": 896, "width": 896}}, 896),
    ({"size": {"height": 2048, "width": 2048}}, 896),  # kept within what the scenes are drawn at
    ({"size": {"shortest_edge": 3136, "longest_edge": 12845056}}, 224),  # Qwen's pixel budgets: any size
    ({"size": {"height": 56, "width": 56}}, 112),
    (None, 224),
])
def test_default_scenes_fit_the_processor(processor, size, tmp_path):
    from vrh_lmms.pipelines.demo.checkpoint import default_spec

    if processor is not None:
        name = "processor_config.json" if "image_processor" in processor else "preprocessor_config.json"
        (tmp_path / name).write_text(json.dumps(processor))
    spec = default_spec(tmp_path)
    assert spec.image_size == size and not spec.prompt_first
    assert spec.scene_config().max_size < size / 2  # room for several objects
