"""The run of `vrh-lmms kv-cache` (its options: vrh_lmms.cli.commands.kv_cache): the VRH-aware KV cache, accuracy
against the image KV kept beside random heads, uniform pruning and no compression."""

from __future__ import annotations

import argparse
from pathlib import Path

from vrh_lmms.base import atomic, console, owned
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.inputs import load_heads_input
from vrh_lmms.model.kvcache.policy import check_budget, check_kv_geometry, topk_budget
from vrh_lmms.runs.checks import dead_heads_of
from vrh_lmms.runs.maps.setup import prepare, run_identity
from vrh_lmms.runs.runner import result_job, result_layout

RESULT, MARKDOWN, PLOT, RUNS = "kv_cache.json", "kv_cache.md", "kv_cache.png", "runs"
# what `vrh-lmms kv-cache` writes into its folder (vrh_lmms.runs.runner.result_layout); `runs` holds one lmms-eval
# run folder per configuration
LAYOUT = result_layout(owned.json_with("rows", schema_prefix="vrh-kv-cache/"), RESULT, MARKDOWN, PLOT, RUNS)


def parse_budgets(text: str) -> list[float]:
    try:
        values = [float(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise VRHError(f"--budgets {text!r}: give shares of image KV kept, e.g. 1,0.5,0.1") from None
    if not values:
        raise VRHError("--budgets names no budget")
    return sorted({check_budget(v) for v in values}, reverse=True)


def run_kv_cache(args: argparse.Namespace) -> int:
    """A job of the runner with one unit (vrh_lmms.runs.runner.result_job): the same arguments into a finished
    folder do nothing and load no model. The accuracies depend on the model, the heads file (its sha256 is in the
    identity), the data and these settings (the random draws are seeded), as a sweep's results do; --force
    evaluates again. A run killed part way is redone whole (its lmms-eval runs are removed first)."""
    # deferred: keeps `vrh-lmms kv-cache --help` free of torch, transformers, matplotlib
    from vrh_lmms.runs.kvcache.evaluate import evaluate_policy, plan
    from vrh_lmms.runs.kvcache.outputs import curve, markdown, table

    budgets = parse_budgets(args.budgets)
    if args.random_seeds < 0:
        raise VRHError(f"--random-seeds must be >= 0, got {args.random_seeds}")
    if args.sink < 0 or args.recent < 0:
        raise VRHError(f"--sink {args.sink} / --recent {args.recent}: give counts >= 0")
    out = Path(args.output)

    def job(tasks: list[str], heads_file):
        identity = run_identity("kv-cache", {**vars(args), "budgets": budgets}, IDENTITY, args.heads_file, tasks)
        return result_job(out, LAYOUT, RESULT, identity, "kv-cache run")

    if args.heads_file:  # the heads file's geometry, before any load: a decoder the policy cannot model is refused
        check_kv_geometry(load_heads_input(str(args.heads_file)).geometry)
    console.step(f"kv-cache: {args.model} on {args.tasks}", line=False)
    run_ = prepare(args.model, args.model_args, args.tasks, args.heads_file, args.allow_cross_model,
                   limit=args.limit, command="kv-cache",
                   why="the KV policies run on the intact model; the heads file orders the groups",
                   job=job, force=args.force)
    if run_.finished:
        console.step(run_.runner.complete_note())
        return 0
    geometry = run_.lm.vrh_decoder.geometry
    ranking = list(run_.heads_file.ranking)
    if args.k is not None:
        budgets = sorted(set(budgets) | {topk_budget(ranking, geometry, args.k)}, reverse=True)
    dead = set(dead_heads_of(run_.lm, run_.heads_file))
    live = [h for h in geometry.all_heads() if h not in dead]
    planned = plan(ranking, live, geometry, budgets, args.random_seeds, args.sink, args.recent)
    done: dict[str, Path] = {}

    def unit(_: str) -> None:
        runs = []
        for i, p in enumerate(planned, 1):
            console.step(f"[{i}/{len(planned)}] {p.name}")
            runs.append(evaluate_policy(run_.lm, p, args.mode, run_.tasks, run_.tm, out / RUNS, limit=args.limit,
                                        gen_kwargs=args.gen_kwargs, seed=args.seed))
        data = {"model": args.model, "model_args": args.model_args, "tasks": run_.tasks,
                "heads_file": str(Path(args.heads_file).resolve()), "mode": args.mode, "sink": args.sink,
                "recent": args.recent, "k": args.k, "geometry": geometry.to_dict(), "dead_heads": len(dead),
                "random_seeds": args.random_seeds, **table(runs, budgets, args.seed)}
        data = {"schema": data.pop("schema"), **data}
        curve(data, out / PLOT)  # the curve and the table first, the JSON last (its presence: the run finished)
        done["md"] = atomic.write_text(out / MARKDOWN, markdown(data, PLOT))
        done["json"] = atomic.write_json(out / RESULT, data)

    run_.runner.run(unit)
    console.print_summary(*console.files_table("KV cache done", [
        (done["md"], "accuracy against image KV kept, per policy and budget"),
        (done["json"], "the same with every figure"),
        (out / PLOT, "the curve"), (out / RUNS, "one lmms-eval run folder per configuration"),
        *console.log_row()]))
    return 0


# what the accuracies depend on, besides the heads file and the data (vrh_lmms.runs.maps.setup.run_identity)
IDENTITY = ("model", "model_args", "tasks", "k", "budgets", "random_seeds", "mode", "sink", "recent", "limit",
            "gen_kwargs", "allow_cross_model", "seed")
