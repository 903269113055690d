"""What precision control draws keep when they are evaluated on a fixed random subset of docs (`--control-docs N`).

Simulated RefCOCO-val-like task: `--images` images with 1 + Poisson(`--per-image` - 1) expressions each (about
8,600 docs at the defaults); correctness under the baseline and the flips each control draw causes share an image
effect (expressions of an image succeed and flip together, as in the real data). Per replicate a new task is drawn
(superpopulation), one image subset of N docs (vrh_lmms.base.stats.subsample.image_subsample), and for two control
draws:

- one draw's drop: coverage of `ci` for the model's expected drop (estimated once from 2,000,000 simulated images)
  and of `ci_docs` for the drop on all docs of this task;
- the between-draw comparison (draw 1's drop minus draw 2's on the same docs, paired): the same two coverages;
- the standard error ratio subset / all docs (both cluster-robust; sqrt(all / N) if only the doc count mattered).

    python benchmarks/sim_control_docs.py                 # ~1 min on one core; docs/sweeps.md holds its table
    python benchmarks/sim_control_docs.py --reps 200      # quick
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from vrh_lmms.base.stats.subsample import image_subsample, subsample_drop  # noqa: E402


def task(rng: np.random.Generator, images: int, per_image: float, draws: tuple[float, ...]):
    """(image id per doc, baseline correct, correct under each draw): logistic image effects on success and flips."""
    sizes = 1 + rng.poisson(per_image - 1, images)
    image = np.repeat(np.arange(images), sizes)
    expit = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    p_base = expit(1.0 + 1.2 * rng.standard_normal(images))[image]
    base = rng.random(image.size) < p_base
    ablated = []
    for shift in draws:
        flip = expit(shift + 1.0 * rng.standard_normal(images))[image]  # an image's expressions flip together
        gain = 0.02  # a wrong answer becomes right now and then
        lost = base & (rng.random(image.size) < flip)
        won = ~base & (rng.random(image.size) < gain)
        ablated.append((base & ~lost) | won)
    return image, base.astype(float), [x.astype(float) for x in ablated]


def expected_drops(seed: int, per_image: float, draws: tuple[float, ...]) -> np.ndarray:
    """The model's drop of each draw (docs weighted equally), from one very large simulated task."""
    _, base, ablated = task(np.random.default_rng(seed + 10_000), 2_000_000, per_image, draws)
    return np.array([float((base - a).mean()) for a in ablated])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=1500)
    p.add_argument("--per-image", type=float, default=5.7, help="mean expressions per image (RefCOCO val: ~5.7)")
    p.add_argument("--subsets", default="all,4000,2000,1000,500", help="docs per subset ('all': every doc)")
    p.add_argument("--reps", type=int, default=1000)
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    draws = (-2.2, -2.6)  # two control draws: ~12% and ~9% of correct answers lost on average
    truth = expected_drops(args.seed, args.per_image, draws)
    sizes = [s.strip() for s in args.subsets.split(",")]
    rng = np.random.default_rng(args.seed)
    hits = {s: np.zeros(4) for s in sizes}
    ratios = {s: [[], []] for s in sizes}
    docs = {s: [] for s in sizes}
    for rep in range(args.reps):
        image, base, (a1, a2) = task(rng, args.images, args.per_image, draws)
        on_all = [(base - a1).mean(), (a2 - a1).mean()]  # this task's all-doc drop and between-draw difference
        full = [subsample_drop(base, a1, image, image, args.alpha), subsample_drop(a2, a1, image, image, args.alpha)]
        for s in sizes:
            idx = np.arange(image.size) if s == "all" else image_subsample(image, int(s), seed=rep)
            one = subsample_drop(base[idx], a1[idx], image[idx], image, args.alpha)
            diff = subsample_drop(a2[idx], a1[idx], image[idx], image, args.alpha)
            hits[s] += [one.ci_low <= truth[0] <= one.ci_high,
                        one.ci_docs_low <= on_all[0] <= one.ci_docs_high or s == "all",
                        diff.ci_low <= truth[0] - truth[1] <= diff.ci_high,
                        diff.ci_docs_low <= on_all[1] <= diff.ci_docs_high or s == "all"]
            ratios[s][0].append(one.se / full[0].se)
            ratios[s][1].append(diff.se / full[1].se)
            docs[s].append(idx.size)
    level = 100 * (1 - args.alpha)
    print(f"{args.reps} simulated tasks of {args.images} images (~{args.per_image} docs each); expected drops "
          f"{truth[0]:.4f} (draw 1), {truth[1]:.4f} (draw 2); nominal {level:.0f}% intervals")
    print("| docs (mean) | one draw: ci covers expected | ci_docs covers all-doc | between draws: ci covers "
          "expected | ci_docs covers all-doc | SE ratio to all docs (one draw / between) | sqrt(all / N) |")
    print("|---|---|---|---|---|---|---|")
    for s in sizes:
        c = 100 * hits[s] / args.reps
        n = float(np.mean(docs[s]))
        all_docs = args.images * args.per_image
        docs_cells = ("(0 width)", "(0 width)") if s == "all" else (f"{c[1]:.1f}%", f"{c[3]:.1f}%")
        print(f"| {s} ({n:.0f}) | {c[0]:.1f}% | {docs_cells[0]} | {c[2]:.1f}% | {docs_cells[1]} | "
              f"{np.mean(ratios[s][0]):.2f} / {np.mean(ratios[s][1]):.2f} | {np.sqrt(all_docs / n):.2f} |")


if __name__ == "__main__":
    main()
