"""`vrh-lmms demo --applications`: after the demo, the heads put to work on the same model and heads file — the
locator (`vrh-lmms locate`), the ranker (`vrh-lmms rank`), the VRH-aware KV cache (`vrh-lmms kv-cache`) and
ranking-loss training (`vrh-lmms rank-train` on the top-k heads and on random heads, each checkpoint ranked again)
— each run through its own command into `<demo>/applications/<name>/`, and one `applications.md` with a headline
line per application (docs/applications.md).

It runs those commands as the command line would, through the `run_command` the command line hands it (the pipelines
floor imports no command: vrh_lmms.cli.commands.demo gives its `run_command`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vrh_lmms.base import atomic, console
from vrh_lmms.base.escape import md
from vrh_lmms.pipelines.demo.stages import EVAL_START, TASK, demo_model_args, scoped_env, synth_config

FOLDER = "applications"
SUMMARY = "applications.md"
# The locator's settings on the demo: the peak rule documented in docs/applications.md (Locator), chosen there
# after Localization Heads' own defaults located nothing on this model (said there as chosen post hoc).
LOCATOR_ARGS = ["--sigma", "0", "--threshold", "0.5"]


# runs one vrh-lmms command (its module name under vrh_lmms.cli.commands, its arguments) in this process
RunCommand = Callable[[str, list[str]], None]


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}"


def _ci(block: dict[str, Any]) -> str:
    return f"{_pct(block['mean'])} [{_pct(block['ci_low'])}, {_pct(block['ci_high'])}]"


def locator_line(result: dict[str, Any]) -> str:
    """One sentence: the locator's Acc@0.5 at each k beside the model's answer and the random-k draws."""
    parts = []
    for row in result["rows"]:
        rnd = row.get("random") or {}
        rnd_text = f"random-{row['k']} {_pct(rnd.get('mean'))}" if rnd.get("draws") else "random unavailable"
        parts.append(f"top-{row['k']} {_ci(row['topk'])} ({rnd_text})")
    answer = result["rows"][0]["answer"]
    return (f"**Locator** ({result['n_docs']} scenes, Acc@0.5 % of the box located from the heads' attention): "
            + "; ".join(parts) + f"; the model's own answer {_ci(answer)}.")


def ranker_line(result: dict[str, Any]) -> str:
    """One sentence: calibrated Recall@1 of the top-k heads, all live heads and random-k, with chance."""
    cal = result["results"]["calibrated"]
    parts = []
    for row in cal["rows"]:
        rnd = row.get("random")
        parts.append(f"top-{row['k']} {_ci(row['topk']['recall@1'])}"
                     + (f" (random-{row['k']} {_pct(rnd['recall@1']['mean'])})" if rnd else ""))
    return (f"**Ranker** ({result['n_queries']} queries x {result['candidates']} candidate images, chance "
            f"{_pct(result['chance_recall@1'])}; Recall@1 %, null-question calibrated): " + "; ".join(parts)
            + f"; all {cal['n_all']} live heads {_ci(cal['all']['recall@1'])}.")


def kv_line(result: dict[str, Any]) -> str:
    """One sentence: accuracy per policy at the smallest budget beside no compression."""
    rows = result["rows"]
    none = rows[0]["accuracy"]
    smallest = min(r["budget"] for r in rows)
    parts = [f"{md(r['policy'])} {_ci(r['accuracy'])}" for r in rows
             if r["budget"] == smallest and r["policy"] != "none"]
    return (f"**KV cache** ({result['n_docs']} scenes, Acc@0.5 %): keeping {100 * smallest:.1f}% of the image KV, "
            + "; ".join(parts) + f"; no compression {_ci(none)}.")


def rank_train_line(before: dict[str, Any], after: dict[str, dict[str, Any]], k: int) -> str:
    """One sentence: the top-k heads' calibrated Recall@1 before and after training each head set."""
    def top(result: dict[str, Any]) -> dict[str, Any]:
        return next(r for r in result["results"]["calibrated"]["rows"] if r["k"] == k)["topk"]["recall@1"]

    parts = [f"after training the {name} heads {_ci(top(res))}" for name, res in after.items()]
    return (f"**Ranking-loss training** (top-{k} heads' Recall@1 %, same queries): before {_ci(top(before))}; "
            + "; ".join(parts) + ".")


def run_applications(out: Path, model_args: str, spec, ks: list[int], random_seeds: int, n_eval: int,
                     n_queries: int, say: Callable[[str], None], model: Path | None = None,
                     n_train: int = 100, *, run_command: RunCommand) -> Path:
    """Locator and KV cache on the demo's evaluation scenes, ranker on its held-out scene stream, ranking-loss
    training on scenes from 200000 (disjoint from both); returns applications.md."""
    folder = out / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    heads = str(out / "heads.json")
    k_text = ",".join(map(str, ks))
    common = ["--model", "vrh_qwen25", "--model_args", model_args, "--heads-file", heads, "--k", k_text,
              "--random-seeds", str(random_seeds), "--force"]
    say(f"[+] applications: locator on {n_eval} evaluation scenes, ranker on {n_queries} queries (k = {k_text})")
    with scoped_env(VRH_SYNTH_CONFIG=synth_config(spec, n_eval, EVAL_START), VRH_CACHE_DIR=str(out / "data")):
        run_command("locate", [*common, "--tasks", TASK, "--limit", str(n_eval), "--gen-kwargs",
                                "max_new_tokens=16", *LOCATOR_ARGS, "--output", str(folder / "locate")])
        run_command("kv_cache", ["--model", "vrh_qwen25", "--model_args", model_args, "--heads-file", heads,
                                  "--tasks", TASK, "--k", str(ks[0]), "--budgets", "1,0.5,0.25,0.1",
                                  "--random-seeds", str(min(3, max(1, random_seeds))), "--limit", str(n_eval),
                                  "--gen-kwargs", "max_new_tokens=16", "--force", "--output", str(folder / "kv_cache")])
    run_command("rank", [*common, "--data", "synth", "--limit", str(n_queries), "--output", str(folder / "rank")])
    after: dict[str, dict[str, Any]] = {}
    if model is not None and n_train > 0:
        say(f"[+] ranking-loss training on {n_train} queries: the top-{ks[0]} heads, then {ks[0]} random heads")
        for name, heads_arg in (("top", "top"), ("random", "random")):
            ckpt = folder / "rank_train" / f"{name}_heads"
            run_command("rank_train", ["--model-dir", str(model), "--heads-file", heads, "--k", str(ks[0]),
                                        "--heads", heads_arg, "--n", str(n_train), "--force", "--output", str(ckpt)])
            run_command("rank", ["--model", "vrh_qwen25", "--model_args", demo_model_args(ckpt, spec),
                                  "--heads-file", heads, "--k", str(ks[0]), "--random-seeds", "0", "--data", "synth",
                                  "--limit", str(n_queries), "--force",
                                  "--output", str(folder / "rank_train" / f"rank_{name}_heads")])
            after[name] = json.loads((folder / "rank_train" / f"rank_{name}_heads" / "rank.json").read_text())
    locate = json.loads((folder / "locate" / "locate.json").read_text())
    rank = json.loads((folder / "rank" / "rank.json").read_text())
    kv = json.loads((folder / "kv_cache" / "kv_cache.json").read_text())
    lines = ["# The heads at work (demo model)", "",
             "Each line is one command's headline; the full tables, intervals and plots are in its folder. "
             "Definitions and the figures on more scenes: docs/applications.md.", "",
             f"- {locator_line(locate)} (`locate/locate.json`)",
             f"- {ranker_line(rank)} (`rank/rank.md`)",
             f"- {kv_line(kv)} (`kv_cache/kv_cache.md`)"]
    if after:
        lines.append(f"- {rank_train_line(rank, after, ks[0])} (`rank_train/`; the training scenes start at 200000)")
    lines += ["", "![ranker](rank/rank.png)", "", "![KV cache](kv_cache/kv_cache.png)", ""]
    atomic.write_text(folder / "applications.json", json.dumps(
        {"schema": "vrh-demo-applications/1", "locate": "locate/locate.json", "rank": "rank/rank.json",
         "kv_cache": "kv_cache/kv_cache.json", "rank_train": sorted(after), "lines": lines[4:8]}, indent=1))
    console.note(f"applications: {folder / SUMMARY}")
    return atomic.write_text(folder / SUMMARY, "\n".join(lines) + "\n")
