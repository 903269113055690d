"""Cost of `vrh_hf` with `heads=none` against the same generation without the plugin.

Both sides are lmms-eval's generic `huggingface` chat backend answering the same requests through its own
`generate_until` (chat template, processor, greedy `generate`, decoding): "plain" is the backend class itself with
only the two transformers-5 corrections `vrh_hf` makes (model class, `audios=`), without which it cannot run at
all; "vrh_hf" is `VRHHf(heads=none)`, i.e. everything the plugin adds (argument checks, decoder survey, record,
processor subclass). Rounds alternate the order of the two; the report gives the median of per-round ratios
(robust to a shared machine's drift) beside the ratio of medians, and a control (plain against itself) for the
noise floor. Target: vrh_hf / plain <= 1.02.

The checkpoint is a random Gemma 3 (tests/support/tiny_gemma3.py) with a larger text stack (6 layers, hidden 512,
8 heads of 64), float32 on CPU; 4 requests of one image and a question, 16 new tokens.

    python benchmarks/bench_vrh_hf_overhead.py                 # about 2 minutes on 2 cores
    python benchmarks/bench_vrh_hf_overhead.py --rounds 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

TASK, SPLIT = "bench", "test"


def _requests(n: int):
    from lmms_eval.api.instance import Instance

    def to_messages(doc):
        return [{"role": "user", "content": [{"type": "image", "url": doc["image"]},
                                             {"type": "text", "text": doc["question"]}]}]

    docs = [{"image": Image.new("RGB", (64 + 8 * i, 48), (40 * i, 90, 200)), "question": f"where is object {i}"}
            for i in range(n)]
    gen = {"max_new_tokens": 16, "temperature": 0}
    reqs = [Instance("generate_until", ("", to_messages, gen, i, TASK, SPLIT), idx=0,
                     metadata={"task": TASK, "doc_id": i, "repeats": 1}) for i in range(n)]
    return docs, reqs


def _plain(pretrained: str):
    from lmms_eval.models.chat.huggingface import Huggingface

    from vrh_lmms.model_wrappers.base import load_dtype
    from vrh_lmms.model_wrappers.hf import image_text_class, media_processor

    with load_dtype(torch.float32), image_text_class():
        lm = Huggingface(pretrained=pretrained, device="cpu", device_map="cpu")
    media_processor(lm.processor)
    return lm


def _timed(lm, reqs) -> tuple[float, list[str]]:
    start = time.perf_counter()
    out = lm.generate_until(reqs)
    return time.perf_counter() - start, [o.text if hasattr(o, "text") else o for o in out]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--requests", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from support.tiny_gemma3 import build

    from vrh_lmms.harness.lmms import build_model

    with tempfile.TemporaryDirectory() as tmp:
        path = str(build(Path(tmp) / "ckpt", seed=0, hidden_size=512, intermediate_size=1376, num_attention_heads=8,
                         num_key_value_heads=4, head_dim=64))
        plain, control = _plain(path), _plain(path)
        ours = build_model("vrh_hf", f"pretrained={path},heads=none,dtype=float32")
        docs, reqs = _requests(args.requests)
        for lm in (plain, control, ours):
            lm.task_dict = {TASK: {SPLIT: docs}}
        answers = {name: _timed(lm, reqs)[1] for name, lm in (("plain", plain), ("vrh_hf", ours))}  # warm-up
        assert answers["plain"] == answers["vrh_hf"], answers
        times: dict[str, list[float]] = {"plain": [], "control": [], "vrh_hf": []}
        for r in range(args.rounds):
            order = [("plain", plain), ("control", control), ("vrh_hf", ours)]
            for name, lm in (order if r % 2 == 0 else order[::-1]):
                times[name].append(_timed(lm, reqs)[0])
    for name in ("control", "vrh_hf"):
        paired = statistics.median(t / p for t, p in zip(times[name], times["plain"]))
        of_medians = statistics.median(times[name]) / statistics.median(times["plain"])
        print(f"{name:8s} / plain: median paired ratio {paired:.3f}, ratio of medians {of_medians:.3f}")
    print(f"plain median {statistics.median(times['plain']) * 1000:.0f} ms per {args.requests} requests; "
          f"answers identical: {answers['plain'] == answers['vrh_hf']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
