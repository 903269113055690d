"""The default `vrh-lmms sweep` against the same command on an older checkout (and `--engine lmms`), side by side.

Each side is the real command line in its own process: `vrh-lmms sweep` on the shipped demo model (Qwen2.5-VL
architecture, float32, CPU), the demo's 100 held-out evaluation scenes, a seeded random heads file, `--k 5` with the
default 19 random draws (baseline + top-5 + 19 random-5 = 21 configurations), `max_new_tokens=16` as the demo uses,
every other flag at its default. The older side runs the same command with PYTHONPATH pointing at a git worktree of
the older commit (same virtual environment; a `sitecustomize` there points the editable install's mapped packages,
`vrh_lmms.model_wrappers` and `vrh_lmms.tasks`, at that worktree's own and hides this checkout's modules from it, so
the older side runs only the older code), e.g.

    git worktree add /tmp/engine-old 6ba5d6d
    python benchmarks/bench_sweep_engine.py --old /tmp/engine-old            # old default vs new default
    python benchmarks/bench_sweep_engine.py --old /tmp/engine-old --lmms     # and --engine lmms (the reference)

Rounds alternate the order of the sides. Every side's answers (each sample's response) and metrics, configuration by
configuration, must equal the first side's; the script exits 1 otherwise. Printed: wall seconds per side (the whole
command, model load included), generations per second (configurations x docs / seconds) and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TASK = "vrh_synth_grounding"
ROOT = Path(__file__).resolve().parents[1]


def answers(out: Path) -> dict[str, tuple]:
    """Per configuration: its metrics and every sample's doc id, response and filtered response."""
    found = {}
    for folder in sorted((out / "configs").iterdir()):
        results = json.loads((folder / "results.json").read_text())
        lines = [json.loads(line) for line in (folder / f"samples_{TASK}.jsonl").read_text().splitlines()]
        found[folder.name] = (results["results"], [(s["doc_id"], s["resps"], s["filtered_resps"]) for s in lines])
    return found


# the older side's start-up: its own mapped packages, not the ones the editable install maps to this checkout
OLD_SITE = """import sys
from importlib.util import spec_from_file_location

OLD = {old!r}
MAPPED = {{"vrh_lmms.model_wrappers": OLD + "/model_wrappers", "vrh_lmms.tasks": OLD + "/tasks"}}


class OldMapped:
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname in MAPPED:
            return spec_from_file_location(fullname, MAPPED[fullname] + "/__init__.py",
                                           submodule_search_locations=[MAPPED[fullname]])
        return None


sys.meta_path[:] = [OldMapped] + [f for f in sys.meta_path if getattr(f, "__name__", "") != "_EditableFinder"]
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", help="a checkout of the older commit (git worktree); omitted: no older side")
    p.add_argument("--lmms", action="store_true", help="also run this checkout with --engine lmms")
    p.add_argument("--docs", type=int, default=100, help="evaluation scenes (default 100, the demo's)")
    p.add_argument("--k", default="5")
    p.add_argument("--random-seeds", type=int, default=19)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--threads", default=None,
                   help="OMP_NUM_THREADS for both sides (default: the environment's, else 1); 'auto': unset, so each "
                        "side picks its threads as a user's run does")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()

    os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    import numpy as np

    from vrh_lmms.base.families import get_family
    from vrh_lmms.base.heads.heads_file import HeadsFile, ranking_from_scores, save_heads_file
    from vrh_lmms.base.synth.demo_spec import DemoSpec
    from vrh_lmms.harness.preload import config_geometry, load_config
    from vrh_lmms.pipelines.demo.pipeline import demo_model_path
    from vrh_lmms.pipelines.demo.stages import EVAL_START, demo_model_args, synth_config

    work = Path(tempfile.mkdtemp(prefix="bench_sweep_engine."))
    model = demo_model_path()
    demo = DemoSpec.load(model)
    g = config_geometry(load_config(str(model)), get_family("qwen2_5_vl"))
    scores = np.random.default_rng(0).random((g.layers, g.heads))
    heads = work / "heads.json"
    save_heads_file(HeadsFile({"id": str(model), "family": "qwen2_5_vl"}, g, scores, ranking_from_scores(scores)),
                    heads)
    n_configs = 2 + args.random_seeds * len(args.k.split(","))  # baseline, top-k and the draws per k
    env = dict(os.environ, VRH_CACHE_DIR=str(work / "data"), VRH_SYNTH_CONFIG=synth_config(demo, args.docs, EVAL_START))
    threads = args.threads or os.environ.get("OMP_NUM_THREADS", "1")
    if threads == "auto":
        env.pop("OMP_NUM_THREADS", None)
    else:
        env["OMP_NUM_THREADS"] = threads
    sides = {"new": (str(ROOT), [])}
    if args.old:
        old_site = work / "old_site"
        old_site.mkdir()
        (old_site / "sitecustomize.py").write_text(OLD_SITE.format(old=str(Path(args.old).resolve())))
        sides["old"] = (f"{Path(args.old).resolve()}{os.pathsep}{old_site}", [])
    if args.lmms:
        sides["new_lmms"] = (str(ROOT), ["--engine", "lmms"])

    def run(name: str, out: Path) -> float:
        path, extra = sides[name]
        cmd = ["vrh-lmms", "sweep", "--model", "vrh_qwen25", "--model_args", demo_model_args(model, demo),
               "--tasks", TASK, "--heads-file", str(heads), "--k", args.k, "--random-seeds", str(args.random_seeds),
               "--gen-kwargs", "max_new_tokens=16", "--output", str(out), *extra]
        start = time.perf_counter()
        subprocess.run(cmd, env=dict(env, PYTHONPATH=path), check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - start

    run("new", work / "warmup")  # the scenes rendered into the data cache, files in the page cache
    rows = []
    names = list(sides)
    for r in range(args.rounds):
        order = names if r % 2 == 0 else names[::-1]
        times = {name: run(name, work / f"r{r}_{name}") for name in order}
        reference = answers(work / f"r{r}_{names[0]}")
        same = {name: answers(work / f"r{r}_{name}") == reference for name in names}
        rows.append({"round": r, "seconds": times, "identical": same})
    accuracies = {cid: v[0][TASK] for cid, v in answers(work / f"r0_{names[0]}").items()}
    shutil.rmtree(work, ignore_errors=True)

    generations = n_configs * args.docs
    print(f"{n_configs} configurations x {args.docs} docs = {generations} generations per side; demo model "
          f"{g.layers} layers x {g.heads} heads, float32, CPU, OMP_NUM_THREADS={threads}")
    print("| round | " + " | ".join(f"{n} s (gen/s)" for n in names) + " | identical answers |")
    print("|---|" + "---|" * len(names) + "---|")
    for row in rows:
        cells = [f"{row['seconds'][n]:.1f} ({generations / row['seconds'][n]:.1f})" for n in names]
        print(f"| {row['round']} | " + " | ".join(cells) + f" | {'yes' if all(row['identical'].values()) else 'NO'} |")
    summary = {}
    for n in names[1:]:
        summary[f"{n}/new"] = statistics.median(row["seconds"][n] / row["seconds"]["new"] for row in rows)
        print(f"median {n} / new: {summary[f'{n}/new']:.2f}")
    first = next(iter(accuracies.values()))
    print(f"accuracy fields per configuration, e.g. baseline: {json.dumps(accuracies.get('baseline', first))}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "summary": summary, "docs": args.docs,
                                               "configurations": n_configs, "accuracies": accuracies}, indent=1))
    return 0 if all(all(row["identical"].values()) for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
