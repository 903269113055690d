"""The shipped demo model was trained on JPEG quality-85 re-encoded scenes (the simple backend's
path), but `vrh_qwen25` evaluates it through the chat backend, which feeds the scene's own pixels. This measures what
that difference does: the same held-out scenes, the same model, inputs built both ways, answers compared.

    python docs/experiments/input_path.py [--n 1000] [--start 100000]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch
from statsmodels.stats.contingency_tables import mcnemar

from research.demo_model.data import FastEncoder, decoded_image
from research.demo_model.train import load_demo_model
from vrh_lmms.base.paths import assets_path
from vrh_lmms.pipelines.demo import probe


def jpeg_decoded_image(scene, spec) -> np.ndarray:
    """The earlier training path: JPEG q85 data URL, then qwen_vl_utils' fetch_image with min = max pixels."""
    from lmms_eval.models.model_utils.media_encoder import encode_image_to_data_url
    from qwen_vl_utils.vision_process import fetch_image

    url = encode_image_to_data_url(scene.image, image_format="JPEG", mime_type="image/jpeg", convert_rgb=True,
                                   quality=85)
    return np.asarray(fetch_image({"type": "image", "image": url, "max_pixels": spec.pixels,
                                   "min_pixels": spec.pixels}), dtype=np.uint8)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--start", type=int, default=100_000, help="first scene id (100000: the demo's eval scenes)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, processor, spec = load_demo_model(assets_path() / "demo_model")
    scenes = probe.held_out_scenes(spec, args.n, start=args.start)
    encoder = FastEncoder(processor, spec, scenes[0])
    results = {}
    for name, images_of in (("png", decoded_image), ("jpeg", jpeg_decoded_image)):
        batches = [encoder.batch(scenes[i:i + 64], np.stack([images_of(s, spec) for s in scenes[i:i + 64]]))
                   for i in range(0, len(scenes), 64)]
        results[name] = probe.evaluate(model, processor.tokenizer, probe.Prepared(scenes, batches))
    png, jpeg = results["png"], results["jpeg"]
    table = [[int(np.sum(jpeg.correct & png.correct)), int(np.sum(jpeg.correct & ~png.correct))],
             [int(np.sum(~jpeg.correct & png.correct)), int(np.sum(~jpeg.correct & ~png.correct))]]
    pixel_diff = [float(np.abs(decoded_image(s, spec).astype(int) - jpeg_decoded_image(s, spec).astype(int)).mean())
                  for s in scenes[:50]]
    out = {"n": args.n, "start": args.start, "acc_png": float(png.correct.mean()),
           "acc_jpeg": float(jpeg.correct.mean()),
           "answers_changed": int(sum(a != b for a, b in zip(png.texts, jpeg.texts))),
           "table_jpeg_rows_png_cols": table, "mcnemar_exact_p": float(mcnemar(table, exact=True).pvalue),
           "parse_fail_png": float(png.parse_rate), "parse_fail_jpeg": float(jpeg.parse_rate),
           "mean_abs_pixel_difference": float(np.mean(pixel_diff))}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
