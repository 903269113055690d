"""Every doc a run will evaluate is read and checked before its folder is claimed and its model loaded
(vrh_lmms.runs.doc_check): a corrupt, empty, non-image, truncated or absurdly large image, a box outside its image
and a blank expression are each one line naming the task and doc, where a sweep used to claim its folder, load the
model and end in a ~100-line RetryError naming no doc (or score the doc silently)."""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
import torch
from PIL import Image

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads import Geometry
from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
from vrh_lmms.base.heads.plan import plan_configurations
from vrh_lmms.harness import lmms
from vrh_lmms.runs.doc_check import doc_problem
from vrh_lmms.runs.sweep.run import SweepSpec, run_sweep

torch.set_num_threads(1)
PIXELS = 224 * 224
TASK = "vrh_refcoco_val"
ROW_1 = "doc 1 \\(row 1\\): image .*"  # an image that does not load names the doc (and row) it is the image of


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the check")

    monkeypatch.setattr(lmms, "build_model", refuse)


def _png_header(width: int, height: int) -> bytes:
    """A PNG that declares `width` x `height` (its header is all PIL reads on open)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def _png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def _truncated_png() -> bytes:
    buf = io.BytesIO()
    noise = np.random.default_rng(0).integers(0, 255, (96, 96, 3), dtype=np.uint8)
    Image.fromarray(noise).save(buf, format="PNG")
    return buf.getvalue()[: len(buf.getvalue()) // 2]


def _data(tmp_path, vrh_env, change) -> None:
    """RefCOCO-schema rows of three synthetic scenes, the second changed by `change`, as VRH_REFCOCO_DATA."""
    import datasets

    from vrh_lmms.base.synth.layouts import hub_rows
    from vrh_lmms.base.synth.scenes import generate_scenes

    rows = hub_rows(generate_scenes(3, seed=1))
    change(rows[1])
    data = tmp_path / "data"
    data.mkdir()
    datasets.Dataset.from_list(rows).cast_column("image", datasets.Image()).to_parquet(str(data / "val.parquet"))
    vrh_env.setenv("VRH_REFCOCO_DATA", str(data))


def _sweep(tiny, tmp_path) -> SweepSpec:
    scores = np.random.default_rng(1).random((2, 4))
    heads = save_heads_file(HeadsFile({"id": "tiny", "family": "qwen2_5_vl"}, Geometry(2, 4, 2, 16), scores,
                                      ranking_from_scores(scores)), tmp_path / "heads.json")
    return SweepSpec(model="vrh_qwen25", model_args=f"pretrained={tiny},min_pixels={PIXELS},max_pixels={PIXELS}",
                     tasks=[TASK], heads_file=str(heads), limit=3, gen_kwargs="max_new_tokens=6",
                     configurations=plan_configurations([1], 0, False, ["zero"]))


def _image(data: bytes):
    def change(row):
        row["image"] = {"bytes": data, "path": None}
    return change


def _bbox(box):
    def change(row):
        row["bbox"] = box
    return change


@pytest.mark.parametrize("change, match", [
    (_image(b"GIF89a not really"), f"{TASK}: VRH_REFCOCO_DATA: {ROW_1} is unreadable \\(UnidentifiedImage"),
    (_image("caf\u00e9 au lait".encode("latin-1")), f"{ROW_1} is unreadable \\(UnidentifiedImageError"),
    (_image(_png_header(30000, 30000)), f"{ROW_1} is unreadable \\(DecompressionBombError: Image size "
                                        "\\(900000000 pixels\\)"),
    # 1-bit, so that it decodes in 12 MB: beyond PIL's warning, short of its refusal, as large as the check allows
    (_image(_png(Image.new("1", (10000, 10000)))), f"{TASK} doc 1: its image is 10000 x 10000 pixels, beyond the "
                                                   f"89,478,485"),
    # the dataset decodes it as the doc is read (lmms-eval's import would have it decode with grey rows)
    (_image(_truncated_png()), f"{TASK} doc 1: does not read \\(OSError: image file is truncated"),
    (_bbox([400.0, 400.0, 10.0, 10.0]), f"{TASK} doc 1: field 'gt_box' is .*: outside the 224 x 224 image"),
], ids=["corrupt", "not-utf8-text", "30000x30000", "10000x10000", "truncated-png", "box-outside"])
def test_a_bad_doc_is_one_line_before_the_sweep_claims_its_folder_or_loads(change, match, tiny_qwen25, tmp_path,
                                                                           vrh_env, no_model_load):
    _data(tmp_path, vrh_env, change)
    out = tmp_path / "sweep"
    with pytest.raises(VRHError, match=match) as err:
        run_sweep(_sweep(tiny_qwen25, tmp_path), out, progress=False)
    assert "\n" not in str(err.value) and "RetryError" not in str(err.value)
    assert not out.exists()


def test_good_docs_pass_and_the_model_loads_next(tiny_qwen25, tmp_path, vrh_env, no_model_load):
    _data(tmp_path, vrh_env, lambda row: None)
    with pytest.raises(AssertionError, match="the model was loaded"):
        run_sweep(_sweep(tiny_qwen25, tmp_path), tmp_path / "sweep", progress=False)


class _Task:
    def __init__(self, images):
        self.images = images

    def doc_to_visual(self, doc):
        return self.images


@pytest.mark.parametrize("doc, problem", [
    ({"expression": "  ", "gt_box": [1, 1, 5, 5], "image_width": 10, "image_height": 10},
     "field 'expression' is '  ': a referring expression must not be blank"),
    ({"expression": None}, "field 'expression' is None"),
    ({"expression": "the cat", "gt_box": [1, 1, 5, 5]}, None),  # the size from its one image
])
def test_expressions_and_box_sizes(doc, problem):
    found = doc_problem(_Task([Image.new("RGB", (10, 10))]), doc, "t doc 0")
    assert found == problem if problem is None else problem in found


def test_an_empty_image_and_an_image_that_does_not_open():
    assert doc_problem(_Task([Image.new("RGB", (0, 4))]), {}, "t doc 0") == "its image is 0 x 4 pixels (empty)"

    class Broken:
        def doc_to_visual(self, doc):
            return [Image.open(io.BytesIO(b""))]

    assert doc_problem(Broken(), {}, "t doc 0").startswith("its media do not open (UnidentifiedImageError")


def test_a_retry_error_is_unwrapped_to_its_cause():
    from tenacity import retry, stop_after_attempt

    from vrh_lmms.harness.lmms_quirks import retry_unwrapped

    @retry(stop=stop_after_attempt(2))
    def fails():
        raise VRHError("row 3: image x.png is unreadable")

    with pytest.raises(VRHError, match="row 3: image x.png is unreadable"):
        with retry_unwrapped():
            fails()


def test_lmms_evals_import_leaves_the_truncated_image_flag_as_it_was(tmp_path):
    """lmms_eval/api/task.py sets ImageFile.LOAD_TRUNCATED_IMAGES = True on import, process-wide."""
    code = ("from PIL import ImageFile\nfrom vrh_lmms.harness import lmms\n"
            "lmms.task_manager(tasks=['vrh_synth_grounding'])\n"
            "import lmms_eval.api.task, json\nprint(json.dumps(ImageFile.LOAD_TRUNCATED_IMAGES))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) is False


def test_steering_reads_every_doc_before_its_folder_or_the_model(tiny_qwen25, tmp_path, vrh_env, no_model_load):
    """Steer and patch run the same docs check as the sweep (images opened and decoded, boxes inside the image)."""
    from vrh_lmms.runs.interventions.steer_run import SteerSpec, plan_steering, run_steering

    _data(tmp_path, vrh_env, _image(b"GIF89a not really"))
    sweep = _sweep(tiny_qwen25, tmp_path)
    spec = SteerSpec(model=sweep.model, model_args=sweep.model_args, tasks=[TASK], heads_file=sweep.heads_file,
                     configurations=plan_steering(sweep.configurations, [4.0]), limit=3)
    out = tmp_path / "steer"
    with pytest.raises(VRHError, match=f"{TASK}: VRH_REFCOCO_DATA: {ROW_1} is unreadable") as err:
        run_steering(spec, out, progress=False)
    assert "\n" not in str(err.value)
    assert not out.exists()
