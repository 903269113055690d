"""`vrh-lmms dpo-train`: DPO with TRL on `dpo-pairs` rows, on a tiny random-weight Qwen2.5-VL."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from vrh_lmms.base.errors import VRHError
from vrh_lmms.cli import main

PIXELS = 3136  # a 56 x 56 image, the tiny processor's minimum: 4 x 4 patches, 4 image tokens


def _pair(i: int, image: Path, chosen: str, rejected: str) -> dict:
    """One row as `vrh-lmms dpo-pairs` writes it (docs/reports.md)."""
    text = {"type": "text", "text": f"Locate thing {i}."}
    return {"prompt": [{"role": "user", "content": [{"type": "image"}, text]}],
            "chosen": [{"role": "assistant", "content": [{"type": "text", "text": chosen}]}],
            "rejected": [{"role": "assistant", "content": [{"type": "text", "text": rejected}]}],
            "images": [str(image)], "chosen_source": "baseline",
            "meta": {"model": "tiny", "config": "top2", "task": "vrh_synth_grounding", "doc_id": str(i),
                     "image_id": str(i), "kind": "grounding", "baseline_status": "correct",
                     "ablated_status": "mislocated", "convention": "qwen2_5_vl"}}


@pytest.fixture()
def pairs(tmp_path) -> Path:
    images = tmp_path / "pairs_images"
    images.mkdir()
    rows = []
    for i, colour in enumerate(("red", "green", "blue", "white")):
        path = images / f"{i}.png"
        Image.new("RGB", (56, 56), colour).save(path)
        rows.append(_pair(i, path, f"[ {4 * i} , 8 , 28 , 40 ]", f"[ 0 , {4 * i} , 12 , 20 ]"))
    out = tmp_path / "pairs.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for path in sorted(folder.glob("*.safetensors")):
        out.update(load_file(path))
    return out


@pytest.mark.slow
def test_one_step_changes_weights_starts_at_log2_and_loads_in_lmms_eval(tiny_qwen25, pairs, tmp_path, capsys,
                                                                         vrh_env):
    out = tmp_path / "dpo"
    rc = main(["dpo-train", str(pairs), "--model-dir", str(tiny_qwen25), "--output", str(out), "--epochs", "1",
               "--batch-size", "4", "--lr", "1e-3"])
    assert rc == 0
    record = json.loads((out / "dpo_train.json").read_text())
    assert record["settings"]["steps"] == 1 and record["pairs"]["n"] == 4
    assert record["trainable"]["parameters"] == record["trainable"]["of"]  # full fine-tune, vision tower included
    # policy == reference on the first step: every log-ratio is 0, the loss is log 2
    first = next(h for h in record["log_history"] if "loss" in h)
    assert first["loss"] == pytest.approx(math.log(2), abs=1e-4)
    assert record["epochs"][0]["loss"] == pytest.approx(math.log(2), abs=1e-4)
    before, after = _weights(tiny_qwen25), _weights(out)
    assert before.keys() == after.keys()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed and any("visual" in k for k in changed) and any("layers" in k for k in changed)
    assert "wrote" in capsys.readouterr().out

    # the checkpoint loads through the real lmms-eval backend (pretrained=OUT) and generates
    from vrh_lmms.harness.lmms import build_model, evaluate, task_manager

    vrh_env.setenv("VRH_SYNTH_CONFIG", json.dumps({"n": 1, "seed": 4}))
    lm = build_model("vrh_qwen25", f"pretrained={out},dtype=float32,min_pixels={PIXELS},max_pixels={PIXELS}")
    results = evaluate(lm, ["vrh_synth_grounding"], task_manager(), limit=1, gen_kwargs="max_new_tokens=4")
    sample = results["samples"]["vrh_synth_grounding"][0]
    assert results["results"]["vrh_synth_grounding"] and sample["resps"] and sample["vrh_record"]["raw"]


@pytest.mark.slow
def test_trl_loss_equals_the_dpo_formula_from_our_own_log_probs(tiny_qwen25, pairs):
    """TRL's first-step loss on our dataset equals -logsigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))) computed
    here from each model's log-probs of the completion tokens (reference: another random tiny model)."""
    import transformers
    import trl
    from torch.nn.functional import logsigmoid

    from vrh_lmms.model.tiny.qwen2_5_vl import build
    from vrh_lmms.runs.dpo_train import TrainOptions, dpo_config, pairs_dataset, read_pairs

    ref_dir = build(tiny_qwen25.parent / "ref", seed=1)
    policy = transformers.AutoModelForImageTextToText.from_pretrained(tiny_qwen25, dtype=torch.float32)
    ref = transformers.AutoModelForImageTextToText.from_pretrained(ref_dir, dtype=torch.float32)
    processor = transformers.AutoProcessor.from_pretrained(tiny_qwen25)
    rows = read_pairs(pairs)
    beta = 0.3
    args = dpo_config(TrainOptions(beta=beta, batch_size=4), tiny_qwen25.parent / "trl_scratch")
    trainer = trl.DPOTrainer(model=policy, ref_model=ref, args=args, train_dataset=pairs_dataset(rows),
                             processing_class=processor)
    batch = trainer.data_collator([dict(trainer.train_dataset[i]) for i in range(4)])
    with torch.no_grad():
        trl_loss = float(trainer.compute_loss(trainer.model, batch))

    def completion_logp(model, row, answer) -> float:
        text = {"type": "text", "text": row["prompt"][0]["content"][1]["text"]}
        messages = [{"role": "user", "content": [{"type": "image"}, text]}]
        prompt = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        full = processor.apply_chat_template(messages + [{"role": "assistant", "content": answer}], tokenize=False)
        completion = full[len(prompt):]
        image = Image.open(row["images"][0]).convert("RGB")
        enc = processor(text=[prompt], images=[image], return_tensors="pt", add_special_tokens=False)
        comp_ids = processor.tokenizer(completion, add_special_tokens=False, return_tensors="pt")["input_ids"]
        ids = torch.cat([enc["input_ids"], comp_ids], dim=1)
        mm = enc.get("mm_token_type_ids")
        extra = {} if mm is None else {"mm_token_type_ids": torch.cat([mm, torch.zeros_like(comp_ids)], dim=1)}
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=enc["pixel_values"],
                           image_grid_thw=enc["image_grid_thw"], **extra).logits
        logp = torch.log_softmax(logits[0, :-1].float(), dim=-1)
        targets = ids[0, 1:]
        n = comp_ids.shape[1]
        return float(logp[-n:].gather(1, targets[-n:, None]).sum())

    policy_plain = transformers.AutoModelForImageTextToText.from_pretrained(tiny_qwen25, dtype=torch.float32)
    losses = []
    for row in rows:
        c, r = row["chosen"][0]["content"][0]["text"], row["rejected"][0]["content"][0]["text"]
        margin = (completion_logp(policy_plain, row, c) - completion_logp(ref, row, c)) \
            - (completion_logp(policy_plain, row, r) - completion_logp(ref, row, r))
        losses.append(float(-logsigmoid(torch.tensor(beta * margin))))
    assert abs(sum(losses) / len(losses) - math.log(2)) > 0.01  # the reference really differs
    assert trl_loss == pytest.approx(sum(losses) / len(losses), rel=1e-4, abs=1e-5)


def test_refusals_are_one_line(tiny_qwen25, pairs, tmp_path, capsys, monkeypatch):
    args = ["--model-dir", str(tiny_qwen25)]
    # a file that is not ours
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text(json.dumps({"prompt": "hi", "completion": "there"}) + "\n")
    assert main(["dpo-train", str(foreign), *args, "--output", str(tmp_path / "o1")]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a preference-pairs file written by `vrh-lmms dpo-pairs`" in err and len(err.splitlines()) == 1
    # an output folder holding something we did not write
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    assert main(["dpo-train", str(pairs), *args, "--output", str(tmp_path / "busy")]) == 2
    assert "did not write (notes.txt)" in capsys.readouterr().err
    # an earlier dpo-train output: refused without --force
    from vrh_lmms.base import owned

    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "dpo_train.json").write_text("{}")
    owned.write_listing(earlier)
    assert main(["dpo-train", str(pairs), *args, "--output", str(earlier)]) == 2
    assert "pass --force" in capsys.readouterr().err
    # the source checkpoint itself
    assert main(["dpo-train", str(pairs), *args, "--output", str(tiny_qwen25)]) == 2
    assert "would replace the source checkpoint" in capsys.readouterr().err
    # bad settings
    assert main(["dpo-train", str(pairs), *args, "--output", str(tmp_path / "o2"), "--epochs", "0"]) == 2
    assert "--epochs must be >= 1" in capsys.readouterr().err
    # a pair whose image is gone
    rows = pairs.read_text().splitlines()
    missing = json.loads(rows[1])
    missing["images"] = [str(tmp_path / "gone.png")]
    broken = tmp_path / "broken.jsonl"
    broken.write_text(rows[0] + "\n" + json.dumps(missing) + "\n")
    assert main(["dpo-train", str(broken), *args, "--output", str(tmp_path / "o3")]) == 2
    assert f"{broken}:2: image {tmp_path / 'gone.png'} does not exist" in capsys.readouterr().err
    # TRL missing: one line naming the extra
    monkeypatch.setitem(sys.modules, "trl", None)
    assert main(["dpo-train", str(pairs), *args, "--output", str(tmp_path / "o4")]) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install 'vrh-lmms[dpo]'" in err and len(err.splitlines()) == 1
    assert not any((tmp_path / name).exists() for name in ("o1", "o2", "o3", "o4"))


def test_after_prompt_moves_the_image_behind_the_text_and_images_decode(pairs):
    from vrh_lmms.runs.dpo_train import pairs_dataset, read_pairs

    rows = read_pairs(pairs, max_pairs=3)
    assert len(rows) == 3
    before = pairs_dataset(rows)[0]
    after = pairs_dataset(rows, "after_prompt")[0]
    assert [p["type"] for p in before["prompt"][0]["content"]] == ["image", "text"]
    assert [p["type"] for p in after["prompt"][0]["content"]] == ["text", "image"]
    assert after["images"][0].size == (56, 56)
    with pytest.raises(VRHError, match="--image-position 'sideways'"):
        from vrh_lmms.runs.dpo_train import TrainOptions

        TrainOptions(image_position="sideways").check()


def test_freeze_vision_names_only_the_vision_tower(tiny_qwen25):
    import transformers

    from vrh_lmms.runs.dpo_train import vision_parameters

    model = transformers.AutoModelForImageTextToText.from_pretrained(tiny_qwen25, dtype=torch.float32)
    frozen = vision_parameters(model)
    names = [n for n, _ in model.named_parameters()]
    assert frozen and all(".visual." in f".{n}" for n in frozen)
    assert any("layers" in n and n not in frozen for n in names) and "lm_head.weight" not in frozen
