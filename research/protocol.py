"""Run the demo-model protocol on a checkpoint: recall k-curve of the text backbone, grounding k-curve with the
causal oracle; writes `protocol.json` and the k-curve plots (the figures of docs/demo-model-experiments.md).

    python -m research.protocol CHECKPOINT [--n 200] [--draws 10] [--no-grounding] [--no-recall]
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from research.demo_model.data import FastEncoder
from research.demo_model.evaluation import evaluate as evaluate_grounding
from research.demo_model.evaluation import held_out_scenes, prepare
from research.demo_model.model_heads import geometry
from research.demo_model.train import DESIGN_FILE, Design, load_demo_model, phases_of
from research.probe import head_scores
from research.text_probe import RecallProbe, recall_examples
from vrh_lmms.base import atomic
from vrh_lmms.base.synth.text_tasks import TextTaskConfig
from vrh_lmms.pipelines.demo import kcurve


def _fmt(result: dict) -> str:
    hits = kcurve.meets_criteria(result)
    return (f"baseline {100 * result['baseline_acc']:.1f}% (n={result['n']}); "
            f"criteria met at k = {hits if hits else 'none'}")


def trained_text_config(checkpoint) -> TextTaskConfig:
    """The text-task settings the checkpoint ended its training with (defaults if it has no design file)."""
    path = Path(checkpoint) / DESIGN_FILE
    if not path.is_file():
        return TextTaskConfig()
    record = json.loads(path.read_text())
    phases = {p["name"]: p for p in phases_of(Design.from_dict(record["design"]))}
    last = list(phases)[-1]
    return TextTaskConfig(**phases[record.get("phase") or last]["text_config"])  # a phase checkpoint: its own


def recall_curve(model, tokenizer, cfg, n: int, pairs: int, ks: Sequence[int], draws: int, log,
                 on_row=lambda result: None) -> dict:
    rp = RecallProbe(model, tokenizer, recall_examples(n, pairs, cfg))
    scores = rp.scores()
    res = kcurve.k_curve(rp.evaluate, scores, ks, draws=draws, log=log, on_row=on_row)
    res["scores"] = scores.round(5).tolist()
    res["pairs"] = pairs
    return res


def grounding_curve(model, processor, spec, n: int, n_score: int, ks: Sequence[int], draws: int, log,
                    on_row=lambda result: None) -> dict:
    scenes = held_out_scenes(spec, n)
    encoder = FastEncoder(processor, spec, scenes[0])
    prep = prepare(encoder, scenes)
    score_prep = prepare(encoder, held_out_scenes(spec, n_score, start=100_000))
    scores = head_scores(model, processor.tokenizer, encoder, score_prep)

    base = evaluate_grounding(model, processor.tokenizer, prep)

    def evaluate(heads):  # the unablated run is `base`, evaluated once (it also gives the parse-failure rate)
        return evaluate_grounding(model, processor.tokenizer, prep, heads).correct if heads else base.correct

    res = kcurve.k_curve(evaluate, scores, ks, draws=draws, log=log, on_row=on_row)
    res["scores"] = scores.round(5).tolist()
    res["parse_fail"] = base.parse_rate
    res["localised"] = base.localised  # the unablated answers' share on *some* object (see EvalResult.localised)
    res["uniform_pick"] = float(np.mean([1 / len(s.objects) for s in scenes]))
    return res


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--n", type=int, default=200, help="held-out scenes (and recall examples) per evaluation")
    ap.add_argument("--n-score", type=int, default=64, help="other held-out scenes for the head scores")
    ap.add_argument("--draws", type=int, default=10)
    ap.add_argument("--ks", default=None, help="comma-separated k values (default 1..N/4)")
    ap.add_argument("--pairs", type=int, default=8, help="recall pairs")
    ap.add_argument("--no-grounding", action="store_true")
    ap.add_argument("--no-recall", action="store_true")
    ap.add_argument("--out", default=None, help="folder for protocol.json and plots (default: the checkpoint)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, processor, spec = load_demo_model(args.checkpoint)
    n_layers, n_heads, _ = geometry(model)
    ks = [int(k) for k in args.ks.split(",")] if args.ks else kcurve.default_ks(n_layers * n_heads)
    out = Path(args.out or args.checkpoint)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "protocol.json"
    result: dict = json.loads(path.read_text()) if path.is_file() else {}
    say = lambda s: print(s, flush=True)  # noqa: E731
    t0 = time.time()

    def keep(name: str):
        """Save after every k, so a long protocol that stops keeps what it measured (marked incomplete)."""
        def save(partial: dict) -> None:
            result[name] = {**partial, "complete": False}
            atomic.write_text(path, json.dumps(result, indent=1))
        return save

    if not args.no_recall:
        say("recall k-curve")
        cfg = trained_text_config(args.checkpoint)
        result["recall"] = recall_curve(model, processor.tokenizer, cfg, args.n, args.pairs, ks, args.draws, say,
                                        keep("recall")) | {"complete": True}
        kcurve.plot_k_curve(result["recall"], out / "kcurve_recall.png", f"recall ({args.pairs} pairs)")
        say("recall: " + _fmt(result["recall"]))
    if not args.no_grounding:
        say("grounding k-curve")
        result["grounding"] = grounding_curve(model, processor, spec, args.n, args.n_score, ks, args.draws, say,
                                              keep("grounding")) | {"complete": True}
        kcurve.plot_k_curve(result["grounding"], out / "kcurve_grounding.png", "grounding Acc@0.5")
        g = result["grounding"]
        say("grounding: " + _fmt(g) + f"; on some object {100 * g['localised']:.1f}% "
            f"(a blind pick among the objects: {100 * g['uniform_pick'] * g['localised']:.1f}%)")
    result["seconds"] = time.time() - t0
    atomic.write_text(path, json.dumps(result, indent=1))
    say(f"wrote {path} ({result['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
