"""`vrh_synth_text_needle`: one fact hidden in a seeded haystack of others, and a question asking for it.

The evidence is a span of the prompt text (`vrh_evidence`, kind `text`; vrh_lmms.runs.discovery.text_span), so discovery
scores heads on the needle's tokens instead of a box's image tokens. Two formats:
- `recall` (default): the associative-recall format the demo model's backbone was pretrained on
  (vrh_lmms.base.synth.text_tasks.recall): `recall : k1 v1 , k2 v2 , ... . key kq ?`, the needle being the pair `kq vq`;
  the demo tokenizer spells every word, so the demo model answers it (it restates the key: `kq vq`).
- `sentence`: `the number of the red circle is 42 .` facts, asked as `what is the number of the blue square ?`,
  in words every tiny checkpoint's tokenizer knows (vrh_lmms.model.tiny.vocab), for tests.
Docs from ``VRH_NEEDLE_CONFIG`` (JSON text or file: n, seed, pairs, format, image), else 100 docs of seed 0, 8 facts;
`image: N` shows a plain N x N grey picture beside the text (the evidence stays the text span).
Scored by exact match of the value: the reply's words, a restated key dropped, must be the value alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import datasets
import numpy as np
from PIL import Image

from vrh_lmms.base.synth.text_tasks import RECALL_KEYS
from vrh_lmms.tasks.common.records import vqa_result
from vrh_lmms.tasks.common.sources import SourceError, env_json_config

TASK = "vrh_synth_text_needle"
CONFIG_ENV = "VRH_NEEDLE_CONFIG"
FORMATS = ("recall", "sentence")
DEFAULTS = {"n": 100, "seed": 0, "pairs": 8, "format": "recall", "value_max": 99, "practice": 8, "image": 0}
COLOURS = ("red", "green", "blue", "yellow", "white", "purple")
SHAPES = ("circle", "square", "triangle", "cross", "diamond")


def needle_config() -> dict[str, Any]:
    cfg = env_json_config(CONFIG_ENV, DEFAULTS)
    if cfg["format"] not in FORMATS:
        raise SourceError(f"{CONFIG_ENV}: format {cfg['format']!r} is not one of {', '.join(FORMATS)}")
    return cfg


def _keys(fmt: str) -> list[str]:
    if fmt == "recall":
        return list(RECALL_KEYS)
    return [f"{c} {s}" for c in COLOURS for s in SHAPES]


def make_doc(i: int, cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Doc i: a pure function of (seed, i) and the sizes; the needle is the queried fact's own words."""
    rng = np.random.default_rng([int(cfg["seed"]), i])
    pool = _keys(cfg["format"])
    n = int(cfg["pairs"])
    if not 1 <= n <= len(pool):
        raise SourceError(f"{CONFIG_ENV}: pairs={n} must be within 1..{len(pool)}")
    keys = [pool[j] for j in rng.choice(len(pool), size=n, replace=False)]
    values = [str(v) for v in rng.integers(0, int(cfg["value_max"]) + 1, size=n)]
    q = int(rng.integers(n))
    if cfg["format"] == "recall":
        facts = [f"{k} {v}" for k, v in zip(keys, values)]
        head, query = "recall : ", f"key {keys[q]} ?"
        # practice queries (as in the backbone's pretraining): other facts restated after the list
        others = [j for j in range(n) if j != q]
        drill = [facts[int(j)] for j in rng.choice(others, size=int(cfg["practice"]))] if others else []
        prompt = head + " , ".join(facts) + " . " + "".join(f"{d} " for d in drill) + query
        start = len(head) + sum(len(f) + 3 for f in facts[:q])
    else:
        facts = [f"the number of the {k} is {v} ." for k, v in zip(keys, values)]
        query = f"what is the number of the {keys[q]} ?"
        prompt = " ".join(facts) + f" {query}"
        start = sum(len(f) + 1 for f in facts[:q])
    needle = facts[q].rstrip(" .")
    assert prompt[start:start + len(needle)] == needle
    doc = {"vrh_prompt": prompt, "vrh_target": values[q], "vrh_key_text": keys[q],
           "vrh_evidence": {"kind": "text", "text": needle, "start": start, "context": prompt, "query": query},
           "image_id": f"needle_{cfg['seed']}_{i}", "question_id": f"needle_{cfg['seed']}_{i}"}
    side = int(cfg["image"])
    if side < 0:
        raise SourceError(f"{CONFIG_ENV}: image={side} must be 0 (text only) or an image side in pixels")
    return doc | ({"vrh_image_size": [side, side]} if side else {})


def vrh_synth_text_needle(dataset):
    """Docs of vrh_synth_text_needle (lmms-eval passes only the placeholder dataset)."""
    cfg = needle_config()
    rows = [make_doc(i, cfg) for i in range(int(cfg["n"]))]
    return datasets.Dataset.from_list([{**r, "vrh_key": f"{TASK}#{i}"} for i, r in enumerate(rows)])


def doc_to_visual(doc: Mapping[str, Any]) -> list:
    """Text only (the evidence is in the prompt), unless the config asks for an image (`image`: its side): a plain
    grey picture that holds nothing, for backends whose processors refuse a prompt without one (LLaVA-NeXT,
    PaliGemma)."""
    size = doc.get("vrh_image_size")
    if not size:
        return []
    return [Image.new("RGB", (int(size[0]), int(size[1])), (128, 128, 128))]


def read_value(reply: str, key: str) -> str | None:
    """The reply's words with a restated key dropped (the demo model answers `kq vq`); None when empty."""
    words = reply.replace("<|im_end|>", " ").strip().rstrip(".").split()
    lead = key.split()
    if len(words) > len(lead) and words[:len(lead)] == lead:
        words = words[len(lead):]
    return " ".join(words) or None


def process_results(doc: Mapping[str, Any], results: list[str]) -> dict[str, Any]:
    reply = results[0] if results else ""
    pred = read_value(reply, doc["vrh_key_text"])
    return vqa_result(image_id=doc["image_id"], pred=pred, target=doc["vrh_target"],
                      correct=pred == str(doc["vrh_target"]), raw=reply, question_type="text_needle",
                      question_id=doc.get("question_id"))
