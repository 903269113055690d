"""`vrh-lmms dpo-pairs`: TRL conversational vision preference rows from a fabricated sweep."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from PIL import Image

from vrh_lmms.base.boxes import get_convention, iou
from vrh_lmms.cli import main
from vrh_lmms.runs.dpo import format_ground_truth_box

TASK = "vrh_refcoco_val"
MODEL = "org/Tiny-VLM-2B"
SIZE = [64, 48]
GT = [8.0, 6.0, 40.0, 30.0]


def _png_bytes(color: str) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", tuple(SIZE), color).save(buf, format="PNG")
    return buf.getvalue()


def _line(doc_id: int, status: str, raw: str, *, media: list[str] | None = None) -> dict:
    record = {"kind": "grounding", "image_id": f"img{doc_id // 2}", "pred_box": None, "gt_box": GT, "iou": 0.0,
              "correct": status == "correct", "status": status, "n_boxes": 1, "convention": "qwen2_5_vl",
              "image_size": SIZE, "raw": raw, "expression": f"thing {doc_id}"}
    line = {"doc_id": doc_id, "target": str(GT), "filtered_resps": raw, "input": f"Locate thing {doc_id}.",
            "vrh_record": record}
    if media is not None:
        line["input_media"] = media
    return line


# doc_id -> (baseline status, ablated status)
OUTCOMES = {0: ("correct", "mislocated"), 1: ("correct", "correct"), 2: ("mislocated", "parse_failure"),
            3: ("correct", "parse_failure"), 4: ("parse_failure", "mislocated"), 5: ("mislocated", "correct")}


def _write(folder: Path, config_id: str, kind: str, lines: list[dict]) -> None:
    folder.mkdir(parents=True)
    (folder / f"samples_{TASK}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    vrh = {"schema": 1, "family": "qwen2_5_vl", "pretrained": MODEL, "geometry": {},
           "ablation": {"spec": config_id, "heads": [], "mode": "zero", "seed": 0, "method": "hook",
                        "heads_file": None},
           "config": {"id": config_id, "kind": kind, "k": 4 if kind == "topk" else None, "seed": None}}
    (folder / "results.json").write_text(json.dumps({"results": {}, "vrh": vrh}))


@pytest.fixture()
def sweep(tmp_path) -> Path:
    root = tmp_path / "sweep"
    base = [_line(d, b, f"baseline answer {d}") for d, (b, _) in OUTCOMES.items()]
    abl = [_line(d, a, f"ablated answer {d}") for d, (_, a) in OUTCOMES.items()]
    _write(root / "configs" / "baseline", "baseline", "baseline", base)
    _write(root / "configs" / "top4", "top4", "topk", abl)
    images = tmp_path / "images"
    images.mkdir()
    for i in range(3):
        (images / f"img{i}.png").write_bytes(_png_bytes("red"))
    return root


def _rows(path: Path) -> list[dict]:
    return [json.loads(t) for t in path.read_text().splitlines()]


def test_pairs_choose_correct_answers_and_reject_ablated_ones(sweep, tmp_path):
    out = tmp_path / "pairs.jsonl"
    rc = main(["dpo-pairs", str(sweep), "--config", "top4", "--output", str(out),
               "--image-root", str(tmp_path / "images"), "--image-pattern", "{image_id}.png"])
    assert rc == 0
    rows = {r["meta"]["doc_id"]: r for r in _rows(out)}
    wrong = {str(d) for d, (_, a) in OUTCOMES.items() if a != "correct"}
    assert set(rows) == wrong
    for doc, row in rows.items():
        base_status = OUTCOMES[int(doc)][0]
        assert row["prompt"] == [{"role": "user", "content": [{"type": "image"},
                                                                {"type": "text", "text": f"Locate thing {doc}."}]}]
        assert row["rejected"] == [{"role": "assistant",
                                    "content": [{"type": "text", "text": f"ablated answer {doc}"}]}]
        assert row["images"] == [str((tmp_path / "images" / f"img{int(doc) // 2}.png").resolve())]
        chosen = row["chosen"][0]["content"][0]["text"]
        if base_status == "correct":
            assert row["chosen_source"] == "baseline" and chosen == f"baseline answer {doc}"
        else:
            assert row["chosen_source"] == "ground_truth"
            back = get_convention("qwen2_5_vl").read_box(chosen, SIZE)
            assert iou(back.box, GT) > 0.9
        assert row["meta"]["baseline_status"] == base_status


def test_chosen_baseline_only_skips_ground_truth_pairs(sweep, tmp_path):
    out = tmp_path / "pairs.jsonl"
    assert main(["dpo-pairs", str(sweep), "--config", "top4", "--output", str(out), "--chosen", "baseline",
                 "--image-root", str(tmp_path / "images"), "--image-pattern", "{image_id}.png"]) == 0
    rows = _rows(out)
    assert {r["meta"]["doc_id"] for r in rows} == {"0", "3"}
    assert all(r["chosen_source"] == "baseline" for r in rows)


def test_missing_images_are_an_error_unless_skipped(sweep, tmp_path, capsys):
    out = tmp_path / "pairs.jsonl"
    assert main(["dpo-pairs", str(sweep), "--config", "top4", "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--image-root" in err and "doc_id" in err
    assert not out.exists()
    # Skipping every pair writes nothing and says why, with a non-zero exit (never an empty file and exit 0).
    assert main(["dpo-pairs", str(sweep), "--config", "top4", "--output", str(out), "--skip-missing-images"]) == 2
    err = capsys.readouterr().err
    assert "no preference pairs" in err and "no image: 4" in err and "nothing was written" in err
    assert not out.exists()


def test_inline_images_are_written_beside_the_jsonl(tmp_path):
    root = tmp_path / "sweep"
    png = _png_bytes("blue")
    uri = "data:image/png;base64," + base64.b64encode(png).decode()
    _write(root / "configs" / "baseline", "baseline", "baseline", [_line(0, "correct", "ok", media=[uri])])
    _write(root / "configs" / "top4", "top4", "topk", [_line(0, "mislocated", "bad", media=[uri])])
    out = tmp_path / "out" / "pairs.jsonl"
    assert main(["dpo-pairs", str(root), "--config", "top4", "--output", str(out)]) == 0
    (row,) = _rows(out)
    image = Path(row["images"][0])
    assert image.parent == (tmp_path / "out" / "pairs_images").resolve()
    assert image.read_bytes() == png
    # Refuses to overwrite the JSONL (and the images folder) without --force.
    assert main(["dpo-pairs", str(root), "--config", "top4", "--output", str(out)]) == 2
    assert main(["dpo-pairs", str(root), "--config", "top4", "--output", str(out), "--force"]) == 0


def test_rows_load_as_a_vision_dataset(sweep, tmp_path):
    """The JSONL loads with `datasets` and the image paths cast to decoded images, as TRL's vision DPO expects."""
    datasets = pytest.importorskip("datasets")
    out = tmp_path / "pairs.jsonl"
    assert main(["dpo-pairs", str(sweep), "--config", "top4", "--output", str(out),
                 "--image-root", str(tmp_path / "images"), "--image-pattern", "{image_id}.png"]) == 0
    ds = datasets.load_dataset("json", data_files=str(out), split="train")
    ds = ds.cast_column("images", datasets.Sequence(datasets.Image()))
    assert ds[0]["images"][0].size == tuple(SIZE)
    assert {"prompt", "chosen", "rejected", "images"} <= set(ds.column_names)


@pytest.mark.parametrize("name", ["qwen2_5_vl", "qwen3_vl", "glm4v", "internvl", "deepseek_vl2", "paligemma",
                                  "llava_next", "phi4_multimodal", "magma", "generic"])
def test_ground_truth_reads_back_in_every_convention(name):
    box, size = [30.5, 40.2, 300.7, 260.1], [640, 480]
    text = format_ground_truth_box(name, box, size, "the red dog")
    assert iou(get_convention(name).read_box(text, size).box, box) > 0.9


def test_paligemma_ground_truth_bins_invert_the_decoder():
    """big_vision's evaluators decode <locNNNN> as NNNN / 1023 * size (vrh_lmms/base/boxes/spaces.py, `loc1023`), so the
    written ground truth is the nearest bin, y first, and reads back within half a bin on every edge."""
    box, size = [30.5, 40.2, 300.7, 479.0], [640, 480]
    text = format_ground_truth_box("paligemma", box, size, "the red dog")
    bins = [round(box[1] / 480 * 1023), round(box[0] / 640 * 1023), round(box[3] / 480 * 1023),
            round(box[2] / 640 * 1023)]
    assert text == "".join(f"<loc{b:04d}>" for b in bins) + " the red dog"
    back = get_convention("paligemma").read_box(text, size).box
    half_bin = [640 / 1023 / 2, 480 / 1023 / 2] * 2
    assert all(abs(a - b) <= h + 1e-9 for a, b, h in zip(back, box, half_bin))


def test_pointing_without_correct_baseline_is_skipped_and_full_reply_is_used(tmp_path, capsys):
    """Pointing records carry no writable ground truth; `filtered_resps` (complete) wins over the truncated raw."""
    def point(doc_id: int, status: str, reply: str) -> dict:
        return {"doc_id": doc_id, "input": "Point to it.", "filtered_resps": reply,
                "vrh_record": {"kind": "pointing", "image_id": "p", "correct": status == "correct",
                               "status": status, "raw": reply[:5]}}

    root = tmp_path / "sweep"
    _write(root / "configs" / "baseline", "baseline", "baseline",
           [point(0, "correct", "[[1, 2]] long baseline"), point(1, "mislocated", "[[9, 9]]")])
    _write(root / "configs" / "top4", "top4", "topk",
           [point(0, "mislocated", "[[7, 7]] long ablated"), point(1, "mislocated", "[[8, 8]]")])
    images = tmp_path / "img"
    images.mkdir()
    (images / "p.png").write_bytes(_png_bytes("green"))
    out = tmp_path / "pairs.jsonl"
    assert main(["dpo-pairs", str(root), "--config", "top4", "--output", str(out), "--image-root", str(images),
                 "--image-pattern", "{image_id}.png"]) == 0
    (row,) = _rows(out)
    assert row["chosen"][0]["content"][0]["text"] == "[[1, 2]] long baseline"
    assert row["rejected"][0]["content"][0]["text"] == "[[7, 7]] long ablated"
    assert "no ground truth: 1" in capsys.readouterr().out


def test_sweep_style_lines_use_arguments_and_doc_image_paths(tmp_path):
    """Sweep samples are the evaluator's own: the prompt is arguments[0] and `doc` may hold an image path."""
    image = tmp_path / "photo.png"
    image.write_bytes(_png_bytes("white"))

    def sweep_line(status: str, reply: str) -> dict:
        line = _line(0, status, reply)
        del line["input"]
        line["arguments"] = ["Locate thing 0.", {"max_new_tokens": 64}, 0, TASK, "val"]
        line["filtered_resps"] = [reply]
        line["doc"] = {"image": str(image), "expression": "thing 0", "image_id": "img0"}
        return line

    root = tmp_path / "sweep"
    _write(root / "configs" / "baseline", "baseline", "baseline", [sweep_line("correct", "good")])
    _write(root / "configs" / "top4", "top4", "topk", [sweep_line("mislocated", "bad")])
    out = tmp_path / "pairs.jsonl"
    assert main(["dpo-pairs", str(root), "--config", "top4", "--output", str(out)]) == 0
    (row,) = _rows(out)
    assert row["prompt"][0]["content"][1]["text"] == "Locate thing 0."
    assert row["images"] == [str(image.resolve())]
    assert row["chosen"][0]["content"][0]["text"] == "good" and row["rejected"][0]["content"][0]["text"] == "bad"


def test_bad_config_is_named(sweep, tmp_path, capsys):
    assert main(["dpo-pairs", str(sweep), "--config", "top99", "--output", str(tmp_path / "p.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "top99" in err and "top4" in err


def test_synthetic_scenes_with_every_object_named_are_regenerated(tmp_path):
    """A sweep over `objects: "all"` scenes (steering / patching data, one sample per nameable object) records that
    in its synth config; the resolver then accepts a sample naming any nameable object of the regenerated scene,
    and still refuses one that names no object of it."""
    import numpy as np

    from vrh_lmms.base.errors import VRHError
    from vrh_lmms.base.synth.scenes import expression_for, generate_scene, nameable_objects
    from vrh_lmms.runs.dpo import ImageResolver, PairOptions

    synth = {"n": 6, "seed": 3, "start": 0, "scene": {}, "objects": "all"}
    scene_id, scene = next((i, s) for i in range(50) if len(nameable_objects(s := generate_scene(i, 3))) > 1)
    other = scene.objects[nameable_objects(scene)[1]]
    x, y, w, h = other.bbox
    record = {"image_id": str(scene_id), "expression": expression_for(other), "gt_box": [x, y, x + w, y + h]}
    resolver = ImageResolver(PairOptions(config="top1"), tmp_path / "images", synth=synth)
    path = resolver._synthetic(record, "vrh_synth_grounding", "doc 0")
    assert np.array_equal(np.asarray(Image.open(path).convert("RGB")), np.asarray(scene.image.convert("RGB")))
    target_only = ImageResolver(PairOptions(config="top1"), tmp_path / "images2", synth=synth | {"objects": "target"})
    with pytest.raises(VRHError, match="is not the sample's"):
        target_only._synthetic(record, "vrh_synth_grounding", "doc 0")
    with pytest.raises(VRHError, match="is not the sample's"):
        resolver._synthetic(record | {"expression": "the plaid unicorn"}, "vrh_synth_grounding", "doc 0")
