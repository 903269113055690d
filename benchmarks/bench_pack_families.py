"""Packed against sequential sweeps on every family's tiny checkpoint, side by side in one run on CPU.

For each family (its `vrh-lmms make-tiny` checkpoint, loaded once through its own `vrh_*` lmms-eval backend), the
real `run_sweep` evaluates 8 configurations (baseline; k = 1, 2: top-k, random-k and layer-matched random-k draws,
zero ablation) twice: `--pack 1` (one configuration after another) and `--pack 8` (one generation pass for all),
in alternating order (ABBA over rounds). Every round checks that both sweeps wrote identical configuration folders,
so a speed-up is never bought with different answers; a family that cannot pack says why (one line, from the same
`packing_unsupported` the sweep asks). Qwen2.5-VL's row is the reference the issue compares against.

    python benchmarks/bench_pack_families.py                           # every family, 8 docs, 2 rounds
    python benchmarks/bench_pack_families.py --families llava gemma3 --docs 16 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_sweep_pack import TASK, sweep_files  # the same files compared (this folder is on the path)

QWEN_PIXELS = f"min_pixels={28 * 28 * 16},max_pixels={28 * 28 * 16}"
# family -> extra model args: Qwen-style processors are held to a small image, as the tests do
EXTRA = {"qwen2_5_vl": QWEN_PIXELS, "qwen3_vl": QWEN_PIXELS}


def bench_family(family: str, work: Path, args) -> dict:
    import numpy as np

    from vrh_lmms.base.families import FAMILIES
    from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
    from vrh_lmms.base.heads.plan import plan_configurations
    from vrh_lmms.harness import lmms
    from vrh_lmms.model.packing import packing_unsupported
    from vrh_lmms.model.tiny.registry import build_tiny
    from vrh_lmms.runs.sweep.run import SweepSpec, run_sweep

    model_id = FAMILIES[family].wrappers[0].model_id
    ckpt = build_tiny(family, work / f"tiny_{family}", seed=0)
    model_args = ",".join(a for a in (f"pretrained={ckpt}", "dtype=float32", EXTRA.get(family, "")) if a)
    lm = lmms.build_model(model_id, model_args, batch_size=args.batch_size)
    why = packing_unsupported(lm.model)
    if why is not None:
        return {"family": family, "model": model_id, "refused": why}
    g = lm.vrh_decoder.geometry
    scores = np.random.default_rng(0).random((g.layers, g.heads))
    scores[[layer for layer in range(g.layers) if not g.has_heads(layer)]] = 0  # a hybrid's linear layers: no heads
    ranking = [h for h in ranking_from_scores(scores) if g.has_heads(h.layer)]
    heads = work / f"heads_{family}.json"
    save_heads_file(HeadsFile({"id": str(ckpt), "family": family}, g, scores, ranking), heads)
    configs = plan_configurations([1, 2], 1, True, ["zero"])

    def sweep(pack: int, out: Path) -> float:
        spec = SweepSpec(model_id, model_args, [TASK], str(heads), configs, batch_size=args.batch_size,
                         gen_kwargs=f"max_new_tokens={args.max_new_tokens}", pack=pack)
        start = time.perf_counter()
        run_sweep(spec, out, lm=lm, progress=False)
        return time.perf_counter() - start

    n = len(configs)
    sweep(n, work / f"{family}_warmup")
    rows = []
    for r in range(args.rounds):
        order = (1, n) if r % 2 == 0 else (n, 1)
        times = {pack: sweep(pack, work / f"{family}_r{r}_p{pack}") for pack in order}
        rows.append({"sequential_s": times[1], "packed_s": times[n], "ratio": times[1] / times[n],
                     "identical_files": sweep_files(work / f"{family}_r{r}_p1") == sweep_files(
                         work / f"{family}_r{r}_p{n}")})
    return {"family": family, "model": model_id, "configs": n, "rounds": rows,
            "median_ratio": statistics.median(row["ratio"] for row in rows),
            "identical": all(row["identical_files"] for row in rows)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", nargs="*", help="families to run (default: every family with a tiny checkpoint)")
    p.add_argument("--docs", type=int, default=8, help="evaluation scenes (default 8)")
    p.add_argument("--rounds", type=int, default=2, help="ABBA rounds (default 2)")
    p.add_argument("--batch-size", type=int, default=1, help="lmms-eval batch size (default 1, the CLI default)")
    p.add_argument("--max-new-tokens", type=int, default=8, help="(default 8)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()

    os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    import torch

    from vrh_lmms.model.tiny.registry import TINY_FACTORIES

    torch.set_num_threads(args.threads)
    families = args.families or sorted(TINY_FACTORIES)
    work = Path(tempfile.mkdtemp(prefix="bench_pack_families."))
    os.environ["VRH_CACHE_DIR"] = str(work / "data")
    os.environ["VRH_SYNTH_CONFIG"] = json.dumps({"n": args.docs, "seed": 5, "scene": {"image_size": 168}})
    results = []
    try:
        for family in families:
            try:
                results.append(bench_family(family, work, args))
            except Exception as exc:  # one family's failure is a row of the table, not the end of the run
                results.append({"family": family, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"})
            print(json.dumps(results[-1]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"\n{args.docs} docs, batch size {args.batch_size}, max_new_tokens {args.max_new_tokens}, "
          f"{args.threads} thread(s), torch {torch.__version__}, {args.rounds} ABBA rounds")
    print("| family | model | sequential s | packed s | median sequential / packed | identical files |")
    print("|---|---|---|---|---|---|")
    for row in results:
        if "rounds" in row:
            seq = "/".join(f"{r['sequential_s']:.1f}" for r in row["rounds"])
            packed = "/".join(f"{r['packed_s']:.1f}" for r in row["rounds"])
            print(f"| {row['family']} | {row['model']} | {seq} | {packed} | {row['median_ratio']:.2f} | "
                  f"{'yes' if row['identical'] else 'NO'} |")
        else:
            print(f"| {row['family']} | {row.get('model', '')} | | | {row.get('refused') or row.get('error')} | |")
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "docs": args.docs, "batch_size": args.batch_size},
                                              indent=1))
    return 0 if all(row.get("identical", "refused" in row) for row in results) else 1


if __name__ == "__main__":
    sys.exit(main())
