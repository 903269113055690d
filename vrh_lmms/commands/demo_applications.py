"""`vrh-lmms demo --applications`: after the demo, the heads put to work on the same model and heads file — the
locator (`vrh-lmms locate`) and the ranker (`vrh-lmms rank`) — each run through its own command into
`<demo>/applications/<name>/`, and one `applications.md` with a headline line per application (docs/applications.md).

It lives with the commands because it runs them: the demo pipeline (vrh_lmms.demo) stays below the command layer.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vrh_lmms import atomic, console

FOLDER = "applications"
SUMMARY = "applications.md"
# The locator's settings on the demo: the peak rule documented in docs/applications.md (Locator), chosen there
# after Localization Heads' own defaults located nothing on this model (said there as chosen post hoc).
LOCATOR_ARGS = ["--sigma", "0", "--threshold", "0.5"]


def _run_command(name: str, argv: list[str]) -> None:
    """Run one vrh-lmms command in this process, as the command line would."""
    import importlib

    module = importlib.import_module(f"vrh_lmms.commands.{name}")
    parser = argparse.ArgumentParser(prog=f"vrh-lmms {name}")
    module.configure(parser)
    status = module.run(parser.parse_args(argv))
    if status:
        from vrh_lmms.errors import VRHError

        raise VRHError(f"demo --applications: vrh-lmms {name} stopped with status {status}")


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


def run_applications(out: Path, model_args: str, spec, ks: list[int], random_seeds: int, n_eval: int,
                     n_queries: int, say: Callable[[str], None]) -> Path:
    """Locator on the demo's evaluation scenes and ranker on its held-out scene stream; returns applications.md."""
    from vrh_lmms.demo.stages import EVAL_START, TASK, scoped_env, synth_config

    folder = out / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    heads = str(out / "heads.json")
    k_text = ",".join(map(str, ks))
    common = ["--model", "vrh_qwen25", "--model_args", model_args, "--heads-file", heads, "--k", k_text,
              "--random-seeds", str(random_seeds), "--force"]
    say(f"[+] applications: locator on {n_eval} evaluation scenes, ranker on {n_queries} queries (k = {k_text})")
    with scoped_env(VRH_SYNTH_CONFIG=synth_config(spec, n_eval, EVAL_START), VRH_CACHE_DIR=str(out / "data")):
        _run_command("locate", [*common, "--tasks", TASK, "--limit", str(n_eval), "--gen-kwargs",
                                "max_new_tokens=16", *LOCATOR_ARGS, "--output", str(folder / "locate")])
    _run_command("rank", [*common, "--data", "synth", "--limit", str(n_queries), "--output", str(folder / "rank")])
    locate = json.loads((folder / "locate" / "locate.json").read_text())
    rank = json.loads((folder / "rank" / "rank.json").read_text())
    lines = ["# The heads at work (demo model)", "",
             "Each line is one command's headline; the full tables, intervals and plots are in its folder. "
             "Definitions and the figures on more scenes: docs/applications.md.", "",
             f"- {locator_line(locate)} (`locate/locate.json`)",
             f"- {ranker_line(rank)} (`rank/rank.md`)", "",
             "![ranker](rank/rank.png)", ""]
    atomic.write_text(folder / "applications.json", json.dumps(
        {"schema": "vrh-demo-applications/1", "locate": "locate/locate.json", "rank": "rank/rank.json",
         "lines": lines[4:6]}, indent=1))
    console.note(f"applications: {folder / SUMMARY}")
    return atomic.write_text(folder / SUMMARY, "\n".join(lines) + "\n")
