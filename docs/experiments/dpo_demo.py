"""Tables of the DPO experiment on the demo model (protocol: docs/experiments/dpo_demo.md) from the folders
that docs/experiments/dpo_demo.sh writes. Acc@0.5 before and after DPO on the 300 evaluation scenes, paired by doc:
difference with the report's interval (Tango, clusters = images) and exact McNemar p.

    python docs/experiments/dpo_demo.py runs/dpo
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from vrh_lmms.base.runfolder.samples import read_samples
from vrh_lmms.base.stats import accuracy, exact_mcnemar, paired_drop

TASK = "vrh_synth_grounding"


def outcomes(sweep: Path, config: str) -> tuple[list[str], np.ndarray, list[str] | None]:
    table = read_samples(sweep / "configs" / config / f"samples_{TASK}.jsonl")
    return table.doc_ids, np.asarray(table.scores, dtype=float), table.image_ids


def compare(before: Path, after: Path, config: str) -> dict:
    """Acc@0.5 of `config` before and after, paired by doc: after - before with its interval, McNemar."""
    ids_b, b, images = outcomes(before, config)
    ids_a, a, _ = outcomes(after, config)
    index = {d: i for i, d in enumerate(ids_a)}
    if set(index) != set(ids_b):
        raise SystemExit(f"{after}: other docs than {before}")
    a = a[[index[d] for d in ids_b]]
    drop = paired_drop(b, a, images, bootstrap=False)  # drop = before - after
    test = exact_mcnemar(b, a)
    acc = accuracy(a, images, quantity="binary")
    return {"before": float(b.mean()), "after": float(a.mean()), "after_ci": [acc.ci_low, acc.ci_high],
            "diff": -drop.drop, "diff_ci": [-drop.ci_high, -drop.ci_low], "lost": test.lost, "gained": test.gained,
            "mcnemar_p": test.pvalue, "n": int(b.size)}


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


def signed(x: float) -> str:
    return f"{100 * x + 0.0:+.1f}"  # + 0.0: no "-0.0"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    out = parser.parse_args().folder
    before = out / "eval_before"
    rows, arms = [], []
    for recipe in ("paper", "explore"):
        for arm in ("top5", "random5_s0"):
            for seed in (0, 1):
                name = f"{recipe}_{arm}_s{seed}"
                after = out / f"eval_{name}"
                if not all((after / "configs" / c / "results.json").is_file() for c in ("baseline", "top5")):
                    continue
                record = json.loads((out / f"ckpt_{name}" / "dpo_train.json").read_text())
                last = record["epochs"][-1]
                rows.append({"run": name, "recipe": recipe, "arm": arm, "seed": seed,
                             "lr": record["settings"]["lr"], "pairs": record["pairs"]["n"],
                             "steps": record["settings"]["steps"], "epochs": record["epochs"],
                             "last_loss": last["loss"], "last_reward_accuracy": last["reward_accuracies"],
                             "last_reward_margin": last["reward_margins"],
                             "baseline": compare(before, after, "baseline"), "top5": compare(before, after, "top5")})
    print("| run | lr | pairs | last-epoch loss / reward acc / margin | Acc@0.5 before -> after | after - before "
          "[95% CI] | lost / gained | McNemar p | top-5 masked: before -> after, diff [95% CI] |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        b, t = r["baseline"], r["top5"]
        print(f"| {r['run']} | {r['lr']:g} | {r['pairs']} | {r['last_loss']:.4f} / {r['last_reward_accuracy']:.2f} / "
              f"{r['last_reward_margin']:.3f} | {pct(b['before'])} -> {pct(b['after'])} | {signed(b['diff'])} "
              f"[{signed(b['diff_ci'][0])}, {signed(b['diff_ci'][1])}] | {b['lost']} / {b['gained']} | "
              f"{b['mcnemar_p']:.3g} | {pct(t['before'])} -> {pct(t['after'])}, {signed(t['diff'])} "
              f"[{signed(t['diff_ci'][0])}, {signed(t['diff_ci'][1])}] |")
    # VRH arm vs control arm after the same training (paired by doc)
    print("\n| recipe, seed | control arm -> VRH arm (Acc@0.5) | VRH - control [95% CI] | McNemar p |")
    print("|---|---|---|---|")
    for recipe in ("paper", "explore"):
        for seed in (0, 1):
            vrh, ctrl = out / f"eval_{recipe}_top5_s{seed}", out / f"eval_{recipe}_random5_s0_s{seed}"
            if not all((f / "configs" / "baseline" / "results.json").is_file() for f in (vrh, ctrl)):
                continue
            c = compare(ctrl, vrh, "baseline")
            arms.append({"recipe": recipe, "seed": seed, **c})
            print(f"| {recipe}, s{seed} | {pct(c['before'])} -> {pct(c['after'])} | {signed(c['diff'])} "
                  f"[{signed(c['diff_ci'][0])}, {signed(c['diff_ci'][1])}] | {c['mcnemar_p']:.3g} |")
    (out / "dpo_demo.json").write_text(json.dumps({"runs": rows, "vrh_vs_control": arms}, indent=2) + "\n")
    print(f"wrote {out / 'dpo_demo.json'}")

if __name__ == "__main__":
    main()
