"""The design card's command works as written (issue 28): after one `vrh-lmms discover` on a checkpoint,
`lmms-eval --model vrh_qwen25 --model_args pretrained=DIR,heads=top2` ablates the heads discovery found, and its
results JSON names the file; `heads=paper:top20` on a Qwen2.5-VL of the 7B's geometry (28 x 28 heads, tiny width)
ablates exactly the paper's Table A2 heads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import offline_env

from vrh_lmms.base.heads import parse_head
from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.base.paths import tasks_path

PIXELS = 224 * 224


@pytest.mark.slow
def test_heads_top_k_without_a_file_uses_what_discover_registered(tiny_qwen25, tmp_path, vrh_env):
    from vrh_lmms.cli import main

    registry = tmp_path / "registry.json"
    vrh_env.setenv("VRH_HEADS_REGISTRY", str(registry))
    vrh_env.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 3, "seed": 4}))
    args = f"pretrained={tiny_qwen25},dtype=float32,min_pixels={PIXELS},max_pixels={PIXELS}"
    heads = tmp_path / "heads.json"
    assert main(["discover", "--model", "vrh_qwen25", "--model_args", args, "--tasks", "vrh_synth_grounding",
                 "--limit", "3", "--gen-kwargs", "max_new_tokens=4", "--output", str(heads)]) == 0
    out = tmp_path / "lmms"
    cmd = [str(Path(sys.executable).with_name("lmms-eval")), "--model", "vrh_qwen25", "--model_args",
           f"{args},heads=top2", "--tasks", "vrh_synth_grounding", "--include_path", str(tasks_path()), "--limit",
           "2", "--batch_size", "1", "--output_path", str(out), "--log_samples", "--gen_kwargs", "max_new_tokens=4"]
    env = offline_env(VRH_HEADS_REGISTRY=str(registry), VRH_CACHE_DIR=str(tmp_path / "cache"),
                      VRH_SYNTH_CONFIG=json.dumps({"n": 3, "seed": 4}))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    results = sorted(out.rglob("*_results.json"))
    assert results, (proc.stdout + proc.stderr)[-3000:]
    ablation = json.loads(results[-1].read_text())["vrh"]["ablation"]
    hf = load_heads_file(heads)
    assert ablation["heads"] == sorted(str(h) for h in hf.ranking[:2])
    assert ablation["heads_file"]["path"] == str(heads.resolve()) and ablation["heads_file"]["source"] == "registry"
    assert ablation["heads_file"]["sha256"] == hf.sha256
    # without a registration the same command is one clear line naming what to do
    env["VRH_HEADS_REGISTRY"] = str(tmp_path / "empty.json")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert "vrh-lmms: error: no heads file is registered for" in proc.stderr and "vrh-lmms discover" in proc.stderr
    assert proc.returncode == 2


def test_paper_top20_on_the_7b_geometry_ablates_table_a2(tmp_path_factory):
    from vrh_lmms.base.heads import paper
    from vrh_lmms.harness import lmms
    from vrh_lmms.model.tiny.qwen2_5_vl import build

    ckpt = build(tmp_path_factory.mktemp("qwen25_7b_shape"), seed=0,
                 text=dict(hidden_size=168, intermediate_size=32, num_hidden_layers=28, num_attention_heads=28,
                           num_key_value_heads=4, head_dim=6))
    args = f"pretrained={ckpt},dtype=float32,min_pixels={PIXELS},max_pixels={PIXELS}"
    for bench in ("refcoco", "refspatial"):
        lm = lmms.build_model("vrh_qwen25", f"{args},heads=paper:top20,heads_source=paper:{bench}")
        table = {parse_head(h) for h in paper.published()["heads"][bench]["Qwen2.5-VL-7B"]}
        assert set(lm.vrh_headset.heads) == table and len(table) == 20
        record = lm.vrh_record()["ablation"]
        assert record["heads_file"]["source"] == f"paper:{bench}" and record["spec"] == "top20"
    with pytest.raises(Exception, match="more heads than the heads file ranks \\(20\\)"):
        lmms.build_model("vrh_qwen25", f"{args},heads=paper:top30")


@pytest.mark.slow
def test_lmms_evals_own_task_runs_on_a_masked_model(tiny_qwen25, tmp_path):
    """Any lmms-eval task works with a masked model: lmms-eval's own MME task (its prompts, scoring and aggregation,
    included unchanged) on local rows in the published lmms-lab/MME schema (question_id, image, question, answer,
    category; https://huggingface.co/datasets/lmms-lab/MME), with two heads masked."""
    import datasets
    import lmms_eval
    from PIL import Image

    # MME asks two questions per image (answers Yes and No) under the image's question_id; its aggregation
    # scores the pair, and refuses an image without both
    rows = [{"question_id": f"{category}/{i:012d}.jpg", "image": Image.new("RGB", (56, 56), (60 * i, 90, 160)),
             "question": f"Is there a {name} in this image? Please answer yes or no.", "answer": answer,
             "category": category}
            for i, category in enumerate(["existence", "count"])
            for name, answer in (("dog", "Yes"), ("cat", "No"))]
    features = datasets.Features({"question_id": datasets.Value("string"), "image": datasets.Image(),
                                  "question": datasets.Value("string"), "answer": datasets.Value("string"),
                                  "category": datasets.Value("string")})
    data = tmp_path / "mme" / "test.parquet"
    data.parent.mkdir()
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(data))
    mme_yaml = Path(lmms_eval.__file__).parent / "tasks" / "mme" / "mme.yaml"
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "mme_local.yaml").write_text(f"include: {mme_yaml}\ntask: mme_local\ndataset_path: parquet\n"
                                          f"dataset_kwargs:\n  data_files:\n    test: {data}\n")
    out = tmp_path / "lmms"
    args = f"pretrained={tiny_qwen25},dtype=float32,min_pixels={PIXELS},max_pixels={PIXELS},heads=L0H1;L1H0"
    cmd = [str(Path(sys.executable).with_name("lmms-eval")), "--model", "vrh_qwen25", "--model_args", args,
           "--tasks", "mme_local", "--include_path", str(tasks), "--batch_size", "1", "--output_path", str(out),
           "--log_samples", "--gen_kwargs", "max_new_tokens=3"]
    proc = subprocess.run(cmd, env=offline_env(VRH_CACHE_DIR=str(tmp_path / "cache")), capture_output=True,
                          text=True, timeout=600, check=False)
    results = sorted(out.rglob("*_results.json"))
    assert results, (proc.stdout + proc.stderr)[-3000:]
    data = json.loads(results[-1].read_text())
    assert "mme_perception_score,none" in data["results"]["mme_local"]  # existence and count are perception
    assert data["n-samples"]["mme_local"]["effective"] == 4
    assert data["vrh"]["ablation"]["heads"] == ["L0H1", "L1H0"]
