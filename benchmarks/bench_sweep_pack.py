"""Sequential vs packed sweep of 16 configurations on a tiny VLM on CPU, side by side in one run.

Both sides are the real `vrh-lmms sweep` (`run_sweep`, lmms-eval's evaluator, one pass and one folder per
configuration) on the same loaded model: `--pack 1` evaluates the configurations one after another, `--pack 16`
generates all 16 answers of a request in one batch during the first pass and replays them in the other passes.
Rounds alternate the order (ABBA), and every round checks that both sweeps wrote identical configuration folders
(metrics, vrh block, sample lines), so the speed-up is never bought with different answers.

The model is the shipped demo model (Qwen2.5-VL architecture, 4 layers x 8 heads), fed as in `vrh-lmms demo`; the
heads file is a seeded random ranking (what is ablated does not change the cost). The 16 configurations are the
baseline, and for k = 1, 2, 3: top-k, two random-k and two layer-matched random-k draws.

    python benchmarks/bench_sweep_pack.py                     # 16 docs, 2 rounds, batch size 1
    python benchmarks/bench_sweep_pack.py --docs 32 --rounds 3 --batch-size 2 --json out.json
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

TASK = "vrh_synth_grounding"


def sweep_files(out: Path) -> dict[str, tuple]:
    contents = {}
    for folder in sorted((out / "configs").iterdir()):
        results = json.loads((folder / "results.json").read_text())
        lines = (folder / f"samples_{TASK}.jsonl").read_text().splitlines()
        contents[folder.name] = (results["results"], results["vrh"], [json.loads(line) for line in lines])
    return contents


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--docs", type=int, default=16, help="evaluation scenes (default 16)")
    p.add_argument("--rounds", type=int, default=2, help="ABBA rounds (default 2)")
    p.add_argument("--batch-size", type=int, default=1, help="lmms-eval batch size (default 1, the CLI default)")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()

    os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    import numpy as np
    import torch

    from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
    from vrh_lmms.base.heads.plan import plan_configurations
    from vrh_lmms.base.synth.demo_spec import DemoSpec
    from vrh_lmms.harness import lmms
    from vrh_lmms.pipelines.demo.pipeline import EVAL_START, _synth_config, demo_model_path
    from vrh_lmms.pipelines.demo.stages import demo_model_args
    from vrh_lmms.runs.sweep.run import SweepSpec, run_sweep

    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="bench_sweep_pack."))
    model = demo_model_path()
    demo = DemoSpec.load(model)
    model_args = demo_model_args(model, demo)
    os.environ["VRH_CACHE_DIR"] = str(work / "data")
    os.environ["VRH_SYNTH_CONFIG"] = _synth_config(demo, args.docs, EVAL_START)
    lm = lmms.build_model("vrh_qwen25", model_args, batch_size=args.batch_size)
    g = lm.vrh_decoder.geometry
    scores = np.random.default_rng(0).random((g.layers, g.heads))
    heads = work / "heads.json"
    save_heads_file(HeadsFile({"id": str(model), "family": "qwen2_5_vl"}, g, scores, ranking_from_scores(scores)),
                    heads)
    configs = plan_configurations([1, 2, 3], 2, True, ["zero"])
    assert len(configs) == 16, len(configs)

    def sweep(pack: int, out: Path) -> float:
        spec = SweepSpec("vrh_qwen25", model_args, [TASK], str(heads), configs, batch_size=args.batch_size,
                         gen_kwargs=f"max_new_tokens={args.max_new_tokens}", pack=pack)
        start = time.perf_counter()
        run_sweep(spec, out, lm=lm, progress=False)
        return time.perf_counter() - start

    sweep(16, work / "warmup")  # datasets, caches and kernels warm for both sides
    rows = []
    for r in range(args.rounds):
        order = (1, 16) if r % 2 == 0 else (16, 1)
        times = {pack: sweep(pack, work / f"r{r}_p{pack}") for pack in order}
        identical = sweep_files(work / f"r{r}_p1") == sweep_files(work / f"r{r}_p16")
        rows.append({"round": r, "sequential_s": times[1], "packed_s": times[16], "ratio": times[1] / times[16],
                     "identical_files": identical})
    shutil.rmtree(work, ignore_errors=True)

    print(f"16 configurations x {args.docs} docs, batch size {args.batch_size}, max_new_tokens {args.max_new_tokens}, "
          f"{args.threads} thread(s), torch {torch.__version__}; demo model {g.layers} layers x {g.heads} heads")
    print("| round | sequential (--pack 1) s | packed (--pack 16) s | sequential / packed | identical files |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['round']} | {row['sequential_s']:.1f} | {row['packed_s']:.1f} | {row['ratio']:.2f} | "
              f"{'yes' if row['identical_files'] else 'NO'} |")
    median = statistics.median(row["ratio"] for row in rows)
    print(f"median ratio {median:.2f} (target >= 2)")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "median_ratio": median, "docs": args.docs,
                                               "batch_size": args.batch_size}, indent=1))
    return 0 if all(row["identical_files"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
