"""The memory a sweep of high-resolution images needs: peak RSS of `vrh-lmms sweep --engine lmms` (the reference,
which keeps nothing between configurations) against `--engine fast` with its cache budget (`VRH_SWEEP_CACHE`), side
by side in one run.

Each side is the real command line in its own process, its peak resident memory read from the kernel when it exits
(`os.wait4`'s ru_maxrss): a tiny random-weight Qwen2.5-VL (float32, CPU; the model is a few MB, so the figures are the
engine's, not the weights'), synthetic grounding scenes of SIZE x SIZE pixels (default 2500: 19 MB each decoded),
baseline + top-1 + 2 random-1 configurations (one pack), 4 new tokens. The scenes are drawn once, before the sides
run. Sides: the reference; the fast engine with each budget of `--budgets` (default `4G`, the default, and `256M`);
with `--old PATH` also the fast engine of an older checkout (e.g. one before the budget, whose caches were bounded by
count), run as bench_sweep_engine.py runs its older side. Every side's answers and metrics must equal the
reference's; the script exits 1 otherwise. Printed per side: peak RSS, its ratio to the reference's, the memory
beyond the reference's, and wall seconds.

    python benchmarks/bench_sweep_memory.py                        # 40 scenes of 2500 x 2500 (~12 min on 2 cores)
    python benchmarks/bench_sweep_memory.py --docs 12 --size 1500  # a quick look
    git archive b8a8d8d | tar -x -C /tmp/old && python benchmarks/bench_sweep_memory.py --old /tmp/old
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TASK = "vrh_synth_grounding"
PIXELS = 28 * 28 * 16  # the processor's resize target: the engine's caches, not the model, should dominate


def answers(out: Path) -> dict[str, tuple]:
    """Per configuration: its metrics and every sample's doc id and responses."""
    found = {}
    for folder in sorted((out / "configs").iterdir()):
        results = json.loads((folder / "results.json").read_text())
        samples = [json.loads(line) for p in sorted(folder.glob("samples_*.jsonl"))
                   for line in p.read_text().splitlines()]
        found[folder.name] = (json.dumps(results["results"], sort_keys=True),
                              [(s["doc_id"], s["resps"], s["filtered_resps"]) for s in samples])
    return found


def peak_rss(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Run `command` in `cwd`; (its peak resident memory in MiB, wall seconds). Fails on a non-zero exit."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        sys.exit(f"side failed ({proc.returncode}): {' '.join(command)}\n{err[-2000:]}")
    return usage.ru_maxrss / 1024, seconds  # ru_maxrss: KiB on Linux


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=40, help="scenes (default 40)")
    parser.add_argument("--size", type=int, default=2500, help="scene width and height in pixels (default 2500)")
    parser.add_argument("--budgets", default="4G,256M", help="the fast engine's VRH_SWEEP_CACHE values (default "
                        "4G,256M)")
    parser.add_argument("--old", help="a checkout of an older commit: its fast engine as one more side")
    args = parser.parse_args()

    import numpy as np

    from vrh_lmms.base.families import get_family
    from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
    from vrh_lmms.base.synth.cache import SynthSpec, ensure_hub_data
    from vrh_lmms.harness.preload import config_geometry, load_config
    from vrh_lmms.model.tiny.qwen2_5_vl import build

    work = Path(tempfile.mkdtemp(prefix="bench_sweep_memory."))
    scene = {"image_size": args.size, "min_size": args.size // 12, "max_size": args.size // 4}
    config = json.dumps({"n": args.docs, "seed": 0, "scene": scene})
    env = dict(os.environ, VRH_SYNTH_CONFIG=config, VRH_CACHE_DIR=str(work / "cache"), OMP_NUM_THREADS="1",
               HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", VRH_THREADS="1")
    os.environ.update(VRH_CACHE_DIR=env["VRH_CACHE_DIR"])
    ensure_hub_data(SynthSpec(n=args.docs, seed=0, scene=scene))  # drawn once, outside the measured processes
    model = build(work / "tiny", seed=0)
    geometry = config_geometry(load_config(str(model)), get_family("qwen2_5_vl"))
    scores = np.random.default_rng(0).random((geometry.layers, geometry.heads))
    heads = save_heads_file(HeadsFile({"id": str(model), "family": "qwen2_5_vl"}, geometry, scores,
                                      ranking_from_scores(scores)), work / "heads.json")
    base = [sys.executable, "-m", "vrh_lmms", "sweep", "--model", "vrh_qwen25", "--model_args",
            f"pretrained={model},dtype=float32,min_pixels={PIXELS},max_pixels={PIXELS}", "--tasks", TASK,
            "--heads-file", str(heads), "--k", "1", "--random-seeds", "2", "--gen-kwargs", "max_new_tokens=4"]
    sides = [("--engine lmms", "lmms", {})]
    if args.old:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_sweep_engine import OLD_SITE

        old_site = work / "old_site"
        old_site.mkdir()
        (old_site / "sitecustomize.py").write_text(OLD_SITE.format(old=str(Path(args.old).resolve())))
        sides.append(("--engine fast, older checkout", "fast",
                      {"PYTHONPATH": f"{Path(args.old).resolve()}{os.pathsep}{old_site}"}))
    sides += [(f"--engine fast, VRH_SWEEP_CACHE={b}", "fast", {"VRH_SWEEP_CACHE": b}) for b in args.budgets.split(",")]
    rows, reference = [], None
    for i, (name, engine, extra) in enumerate(sides):
        out = work / f"side{i}"
        # run outside this checkout: `python -m` puts the working folder first on sys.path
        rss, seconds = peak_rss(base + ["--engine", engine, "--output", str(out)], env | extra, work)
        got = answers(out)
        reference = reference or got
        rows.append((name, rss, seconds, got == reference))
    ref_rss = rows[0][1]
    print(f"{args.docs} scenes of {args.size}x{args.size} ({args.size * args.size * 3 / 2**20:.1f} MiB each decoded),"
          f" 4 configurations in one pack, tiny Qwen2.5-VL on CPU")
    print(f"{'side':<38} {'peak RSS MiB':>12} {'x reference':>11} {'beyond ref MiB':>14} {'seconds':>8} same")
    for name, rss, seconds, same in rows:
        print(f"{name:<38} {rss:12.0f} {rss / ref_rss:11.2f} {rss - ref_rss:14.0f} {seconds:8.1f} {same}")
    return 0 if all(same for *_, same in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
