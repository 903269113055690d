"""Heads found on one demo VLM (scorer top-9, causal oracle-1/-3) ablated in another that shares its backbone, and the
Spearman correlation of the two models' single-head drop maps (docs/demo-model-experiments.md, p5 seeds 0 and 1).

    python -m research.head_transfer SRC/protocol.json DST_CHECKPOINT DST/protocol.json [N]
"""

import json
import re
import sys

import numpy as np
import torch
from scipy.stats import spearmanr

from research.demo_model import evaluation as probe
from research.demo_model.data import FastEncoder
from research.demo_model.train import load_demo_model


def heads(names: list[str]) -> list[tuple[int, int]]:
    return [tuple(map(int, re.match(r"L(\d+)H(\d+)", s).groups())) for s in names]


def main() -> None:
    torch.set_num_threads(1)
    src = json.load(open(sys.argv[1]))["grounding"]
    dst = json.load(open(sys.argv[3]))["grounding"]
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 200
    model, proc, spec = load_demo_model(sys.argv[2])
    scenes = probe.held_out_scenes(spec, n)  # the protocol's own held-out scenes (ids 0..n-1)
    prep = probe.prepare(FastEncoder(proc, spec, scenes[0]), scenes)
    base = probe.evaluate(model, proc.tokenizer, prep).acc50
    print(f"destination baseline {100 * base:.1f} (its protocol: {100 * dst['baseline_acc']:.1f})")
    for label, names in (("source oracle-1", src["oracle_ranking"][:1]), ("source oracle-3", src["oracle_ranking"][:3]),
                         ("own oracle-3", dst["oracle_ranking"][:3]), ("source top-9", src["ranking"][:9]),
                         ("own top-9", dst["ranking"][:9])):
        acc = probe.evaluate(model, proc.tokenizer, prep, heads(names)).acc50
        print(f"| {label} | {', '.join(names)} | {100 * (base - acc):.1f} |")
    for what in ("single_head_drops", "scores"):
        r = spearmanr(np.ravel(src[what]), np.ravel(dst[what]))
        print(f"{what}: Spearman {r.statistic:.2f} (p = {r.pvalue:.2g})")


if __name__ == "__main__":
    main()
