"""torch's default thread count vs vrh-lmms' choice from the free cores, side by side, with other work running.

Each round runs the same workload twice in fresh processes, in alternating order: once with torch's default
(one thread per core; `VRH_THREADS=torch`) and once with vrh-lmms' choice (`vrh_lmms.model.device.choose_threads`:
the cores not kept busy by others). `--busy N` starts N busy-loop processes first, as another job on the machine
would be. The workload is `vrh-lmms demo` (the README's main job), smaller with `--n-eval` / `--n-discovery`.

  python benchmarks/bench_threads.py                       # full demo, one busy process, 2 rounds
  python benchmarks/bench_threads.py --busy 0 --rounds 1   # the idle-machine case (choice = torch's default)
  python benchmarks/bench_threads.py --n-eval 40 --n-discovery 8 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUSY_LOOP = "while True:\n    pass\n"
CHOSEN = "import torch; from vrh_lmms.model.device import choose_threads; t = choose_threads(); print(t)"


def _env(variant: str) -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", PYTHONWARNINGS="ignore")
    env.pop("OMP_NUM_THREADS", None)  # an explicit OpenMP setting would override both variants
    env.pop("VRH_THREADS", None)
    if variant == "default":
        env["VRH_THREADS"] = "torch"
    return env


def run_once(variant: str, args: argparse.Namespace) -> tuple[float, str]:
    """Wall seconds of one demo run, and the thread count that variant used."""
    threads = subprocess.run([sys.executable, "-c", CHOSEN if variant == "chosen" else
                              "import torch; print(torch.get_num_threads())"], env=_env(variant),
                             capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    with tempfile.TemporaryDirectory(prefix="bench_threads_") as tmp:
        cmd = [sys.executable, "-m", "vrh_lmms", "demo", "--output", str(Path(tmp) / "demo"),
               "--n-eval", str(args.n_eval), "--n-discovery", str(args.n_discovery)]
        start = time.perf_counter()
        proc = subprocess.run(cmd, env=_env(variant), capture_output=True, text=True)
        seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{variant} run failed:\n{proc.stderr[-3000:]}")
    return seconds, threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=1, help="busy-loop processes running meanwhile (default 1)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of (default, chosen) pairs (default 2)")
    parser.add_argument("--n-eval", type=int, default=100, help="demo --n-eval (default 100, the demo's)")
    parser.add_argument("--n-discovery", type=int, default=32, help="demo --n-discovery (default 32)")
    parser.add_argument("--json", help="write the measurements here")
    args = parser.parse_args()

    hogs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(args.busy)]
    rows = []
    try:
        time.sleep(1.0 if hogs else 0.0)  # let the busy processes show in the CPU counters
        for r in range(args.rounds):
            order = ("default", "chosen") if r % 2 == 0 else ("chosen", "default")
            times = {}
            for variant in order:
                seconds, threads = run_once(variant, args)
                times[variant] = (seconds, threads)
                print(f"round {r + 1}: {variant:7s} {threads} thread(s)  {seconds:6.1f} s", flush=True)
            rows.append({"round": r + 1, **{f"{v}_s": t[0] for v, t in times.items()},
                         **{f"{v}_threads": t[1] for v, t in times.items()},
                         "ratio": times["chosen"][0] / times["default"][0]})
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    ratios = [row["ratio"] for row in rows]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n{len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()} usable "
          f"cores, {args.busy} busy process(es), load average after the run {load:.1f}")
    print(f"chosen / default wall time: median {statistics.median(ratios):.3f} "
          f"(rounds: {', '.join(f'{x:.3f}' for x in ratios)})")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows, "load_after": load}, indent=1))


if __name__ == "__main__":
    main()
