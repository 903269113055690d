"""Tables of the ranking-loss experiment on the demo model (protocol:
docs/experiments/rank_train_demo.md) from the folders docs/experiments/rank_train_demo.sh writes.

Ranker: Recall@1 of each head set before and after, paired by query (after - before, cluster-robust t interval over
candidate sets, as the ranker's own paired differences). Grounding: Acc@0.5 before and after, paired by doc (Tango
interval, clusters = images; exact McNemar p).

    python docs/experiments/rank_train_demo.py runs/rank_train
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from vrh_lmms.base.runfolder.samples import read_samples
from vrh_lmms.base.stats import accuracy, exact_mcnemar, paired_drop

TASK = "vrh_synth_grounding"


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


def signed(x: float) -> str:
    return f"{100 * x + 0.0:+.1f}"


def hits(rank: dict, scoring: str, set_id: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-query Recall@1 (0/1; the mean over draws for 'random5') and the candidate-set clusters."""
    qs = rank["queries"]
    if set_id == "random5":
        ids = [s for s in qs[0]["ranks"][scoring] if s.startswith("random5_s")]
        vals = np.mean([[q["ranks"][scoring][s] == 1 for s in ids] for q in qs], axis=1)
    else:
        vals = np.array([q["ranks"][scoring][set_id] == 1 for q in qs], dtype=float)
    return vals, np.array([q["set"] for q in qs])


def rank_row(before: dict, after: dict, scoring: str, set_id: str) -> dict:
    b, clusters = hits(before, scoring, set_id)
    a, _ = hits(after, scoring, set_id)
    binary = set_id != "random5"
    acc = accuracy(a, clusters, quantity="binary" if binary else "unbounded")
    d = accuracy(a - b, clusters, quantity="unbounded")
    return {"before": float(b.mean()), "after": float(a.mean()), "after_ci": [acc.ci_low, acc.ci_high],
            "diff": d.mean, "diff_ci": [d.ci_low, d.ci_high], "n": int(a.size)}


def outcomes(sweep: Path, config: str):
    table = read_samples(sweep / "configs" / config / f"samples_{TASK}.jsonl")
    return table.doc_ids, np.asarray(table.scores, dtype=float), table.image_ids


def ground_row(before: Path, after: Path, config: str) -> dict:
    ids_b, b, images = outcomes(before, config)
    ids_a, a, _ = outcomes(after, config)
    index = {d: i for i, d in enumerate(ids_a)}
    a = a[[index[d] for d in ids_b]]
    drop = paired_drop(b, a, images, bootstrap=False)
    test = exact_mcnemar(b, a)
    acc = accuracy(a, images, quantity="binary")
    return {"before": float(b.mean()), "after": float(a.mean()), "after_ci": [acc.ci_low, acc.ci_high],
            "diff": -drop.drop, "diff_ci": [-drop.ci_high, -drop.ci_low], "mcnemar_p": test.pvalue,
            "n": int(b.size)}


def cell(r: dict) -> str:
    return (f"{pct(r['before'])} -> {pct(r['after'])} [{pct(r['after_ci'][0])}, {pct(r['after_ci'][1])}] | "
            f"{signed(r['diff'])} [{signed(r['diff_ci'][0])}, {signed(r['diff_ci'][1])}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    out = parser.parse_args().folder
    before = json.loads((out / "eval_before" / "rank" / "rank.json").read_text())
    runs = sorted(p.name[len("eval_"):] for p in out.glob("eval_*") if p.name != "eval_before"
                  and (p / "rank" / "rank.json").is_file() and (p / "grounding" / "sweep.json").is_file())
    rows = []
    for name in runs:
        record = json.loads((out / f"ckpt_{name}" / "rank_train.json").read_text())
        rank = json.loads((out / f"eval_{name}" / "rank" / "rank.json").read_text())
        steps = record["steps"]
        first, last = steps[: len(steps) // 5], steps[-(len(steps) // 5):]
        row = {"run": name, "heads": record["heads"], "lr": record["settings"]["lr"],
               "train": {k: [float(np.mean([s[k] for s in part])) for part in (first, last)]
                         for k in ("rank_loss", "lm_loss", "gold_share", "gold_top")},
               "rank": {sc: {s: rank_row(before, rank, sc, s) for s in ("top5", "all", "random5")}
                        for sc in ("calibrated", "raw")},
               "grounding": {c: ground_row(out / "eval_before" / "grounding", out / f"eval_{name}" / "grounding", c)
                             for c in ("baseline", "top5")}}
        if name.startswith("random5_s"):
            trained = f"random5_s{name.split('_s')[-1]}"
            row["rank"]["trained_heads"] = {sc: rank_row(before, rank, sc, trained) for sc in ("calibrated", "raw")}
        rows.append(row)
    print("| run | lr | train, first -> last fifth: rank loss / gold first | LM loss |")
    print("|---|---|---|---|")
    for r in rows:
        t = r["train"]
        print(f"| {r['run']} ({' '.join(r['heads'])}) | {r['lr']:g} | {t['rank_loss'][0]:.3f} -> "
              f"{t['rank_loss'][1]:.3f} / {pct(t['gold_top'][0])} -> {pct(t['gold_top'][1])}% | "
              f"{t['lm_loss'][0]:.3f} -> {t['lm_loss'][1]:.3f} |")
    for sc in ("calibrated", "raw"):
        print(f"\nRecall@1 ({sc}), before -> after [95% CI] | after - before [95% CI]\n")
        print("| run | top-5 | | all live heads | | random-5 (10 draws) | | the trained random heads | |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            tr = r["rank"].get("trained_heads", {}).get(sc)
            print(f"| {r['run']} | {cell(r['rank'][sc]['top5'])} | {cell(r['rank'][sc]['all'])} | "
                  f"{cell(r['rank'][sc]['random5'])} | {cell(tr) if tr else ' | '} |")
    arms = []
    for seed in sorted({r["run"].split("_s")[-1] for r in rows}):
        top = out / f"eval_top5_s{seed}" / "rank" / "rank.json"
        rnd = out / f"eval_random5_s{seed}" / "rank" / "rank.json"
        if f"top5_s{seed}" in runs and f"random5_s{seed}" in runs:
            t, c = json.loads(top.read_text()), json.loads(rnd.read_text())
            arms.append({"seed": int(seed), **{sc: rank_row(c, t, sc, "top5") for sc in ("calibrated", "raw")},
                         "grounding": ground_row(rnd.parent.parent / "grounding", top.parent.parent / "grounding",
                                                 "baseline")})
    print("\nTop-heads arm vs random-heads arm after training, same seed (paired): random arm -> top arm | "
          "top - random [95% CI]\n")
    print("| seed | top-5 Recall@1, calibrated | | raw | | grounding Acc@0.5 | |")
    print("|---|---|---|---|---|---|---|")
    for a in arms:
        print(f"| {a['seed']} | {cell(a['calibrated'])} | {cell(a['raw'])} | {cell(a['grounding'])} |")
    print("\nGrounding Acc@0.5 (300 scenes), before -> after [95% CI] | after - before [95% CI] (McNemar p)\n")
    print("| run | unmasked | | top-5 masked | |")
    print("|---|---|---|---|---|")
    for r in rows:
        g = r["grounding"]
        print(f"| {r['run']} | {cell(g['baseline'])} (p {g['baseline']['mcnemar_p']:.3g}) | {cell(g['top5'])} "
              f"(p {g['top5']['mcnemar_p']:.3g}) |")
    (out / "rank_train_demo.json").write_text(json.dumps({"runs": rows, "top_vs_random": arms}, indent=2) + "\n")
    print(f"\nwrote {out / 'rank_train_demo.json'}")


if __name__ == "__main__":
    main()
