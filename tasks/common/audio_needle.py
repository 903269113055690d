"""`vrh_synth_audio_needle`: a run of high beeps hidden among low hums in a short clip; the question asks how many.

Every doc is a pure function of (seed, index) and the config: background noise, `distractors` low hums (150-350 Hz,
0.3-0.8 s) and one needle, `value` beeps of 1 kHz (80 ms on, 80 ms off), at a seeded time that overlaps no hum.
The answer is the beep count, so it needs the needle; the needle's seconds are the doc's evidence
(`vrh_evidence`, kind `audio`; vrh_lmms.runs.discovery.audio_evidence). The clip is written when lmms-eval asks for the
doc's media (`doc_to_visual` renders the doc's plan at 16 kHz), so nothing is downloaded and nothing large is stored.
Docs from ``VRH_AUDIO_CONFIG`` (JSON text or file: n, seed, seconds, value_max, distractors), else 50 docs of seed
0, 6 s clips, 1-5 beeps, 4 hums. Scored by exact match of the first integer in the reply.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import datasets
import numpy as np

from vrh_lmms.tasks.common.records import vqa_result
from vrh_lmms.tasks.common.sources import SourceError, env_json_config

TASK = "vrh_synth_audio_needle"
CONFIG_ENV = "VRH_AUDIO_CONFIG"
SAMPLING_RATE = 16000
DEFAULTS = {"n": 50, "seed": 0, "seconds": 6.0, "value_max": 5, "distractors": 4}
BEEP_HZ, BEEP_ON, BEEP_OFF = 1000.0, 0.08, 0.08
QUESTION = "how many high beeps are in the audio clip ? answer with a number ."
_INT = re.compile(r"\d+")


def audio_config() -> dict[str, Any]:
    cfg = env_json_config(CONFIG_ENV, DEFAULTS)
    longest = int(cfg["value_max"]) * (BEEP_ON + BEEP_OFF)
    if not 1 <= int(cfg["value_max"]) <= 9 or float(cfg["seconds"]) < longest + 0.4:
        raise SourceError(f"{CONFIG_ENV}: need 1 <= value_max <= 9 and seconds >= {longest + 0.4:.2f} "
                          f"(the longest needle plus 0.2 s each side)")
    return cfg


def clip_plan(rng: np.random.Generator, seconds: float, value: int, distractors: int,
              noise_seed: list[int]) -> dict[str, Any]:
    """A clip's plan: `value` beeps at a random time (0.2 s clear of either end) and up to `distractors` low hums
    that never overlap the beeps or each other (rejection sampling, drawn from `rng` in this order)."""
    length = value * (BEEP_ON + BEEP_OFF) - BEEP_OFF
    t0 = round(float(rng.uniform(0.2, seconds - length - 0.2)), 3)
    needle = (t0, round(t0 + length, 3))
    hums: list[tuple[float, float, float]] = []
    for _ in range(200):
        if len(hums) == distractors:
            break
        dur = float(rng.uniform(0.3, 0.8))
        start = float(rng.uniform(0.0, seconds - dur))
        span = (round(start, 3), round(start + dur, 3))
        if all(span[1] <= a or span[0] >= b for a, b in [needle] + [(h[0], h[1]) for h in hums]):
            hums.append((*span, round(float(rng.uniform(150, 350)), 1)))
    return {"seconds": seconds, "needle": list(needle), "beeps": value, "hums": [list(h) for h in hums],
            "noise_seed": noise_seed}


def make_doc(i: int, cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Doc i: the clip's plan (needle and hums, in seconds), the answer and the needle's seconds as evidence."""
    rng = np.random.default_rng([int(cfg["seed"]), i])
    seconds = float(cfg["seconds"])
    value = int(rng.integers(1, int(cfg["value_max"]) + 1))
    plan = clip_plan(rng, seconds, value, int(cfg["distractors"]), [int(cfg["seed"]), i])
    samples = int(round(seconds * SAMPLING_RATE))
    key = f"audio_needle_{cfg['seed']}_{i}"
    return {"vrh_prompt": QUESTION, "vrh_target": str(value), "vrh_audio_plan": json.dumps(plan),
            "vrh_evidence": {"kind": "audio", "seconds": plan["needle"], "samples": samples, "query": QUESTION},
            "image_id": key, "question_id": key}


def render(plan: Mapping[str, Any]) -> np.ndarray:
    """The clip of a plan, float32 at 16 kHz: noise, hums, then the beeps (each with 5 ms ramps)."""
    n = int(round(float(plan["seconds"]) * SAMPLING_RATE))
    t = np.arange(n) / SAMPLING_RATE
    wav = np.random.default_rng(plan["noise_seed"]).standard_normal(n) * 0.01
    for a, b, hz in plan["hums"]:
        on = (t >= a) & (t < b)
        wav[on] += 0.3 * np.sin(2 * np.pi * hz * t[on])
    start = float(plan["needle"][0])
    for k in range(int(plan["beeps"])):
        a = start + k * (BEEP_ON + BEEP_OFF)
        on = (t >= a) & (t < a + BEEP_ON)
        ramp = np.clip(np.minimum(t[on] - a, a + BEEP_ON - t[on]) / 0.005, 0, 1)
        wav[on] += 0.5 * ramp * np.sin(2 * np.pi * BEEP_HZ * t[on])
    return wav.astype(np.float32)


def vrh_synth_audio_needle(dataset):
    """Docs of vrh_synth_audio_needle (lmms-eval passes only the placeholder dataset)."""
    cfg = audio_config()
    rows = [make_doc(i, cfg) for i in range(int(cfg["n"]))]
    return datasets.Dataset.from_list([{**r, "vrh_key": f"{TASK}#{i}"} for i, r in enumerate(rows)])


def doc_to_visual(doc: Mapping[str, Any]) -> list:
    """The clip, in lmms-eval's audio form (what its audio backends read: array + sampling_rate)."""
    return [{"array": render(json.loads(doc["vrh_audio_plan"])), "sampling_rate": SAMPLING_RATE}]


def read_count(reply: str) -> str | None:
    found = _INT.search(reply or "")
    return None if found is None else str(int(found.group()))


def process_results(doc: Mapping[str, Any], results: list[str]) -> dict[str, Any]:
    reply = results[0] if results else ""
    pred = read_count(reply)
    return vqa_result(image_id=doc["image_id"], pred=pred, target=doc["vrh_target"],
                      correct=pred == str(doc["vrh_target"]), raw=reply, question_type="audio_needle",
                      question_id=doc.get("question_id"))
