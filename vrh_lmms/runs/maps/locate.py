"""The run of `vrh-lmms locate` (its options: vrh_lmms.cli.commands.locate): the training-free locator, boxes from
the top-k heads' attention maps, Acc@0.5 beside the model's answer and the control draws."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.table import Table

from vrh_lmms.base import atomic, console
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.kinds import KINDS
from vrh_lmms.base.owned import json_with
from vrh_lmms.runs.checks import dead_heads_of
from vrh_lmms.runs.maps.collect import collect_maps
from vrh_lmms.runs.maps.locator import LocatorSettings, parse_threshold
from vrh_lmms.runs.maps.setup import prepare, run_identity
from vrh_lmms.runs.runner import result_job, result_layout

RESULT = "locate.json"
SCHEMA = "vrh-locate/1"
# what `vrh-lmms locate` writes into its folder (vrh_lmms.runs.runner.result_layout)
LAYOUT = result_layout(json_with("rows", schema_prefix="vrh-locate/"), RESULT)


def _pct(v: float) -> str:
    return f"{100 * v:.1f}"


def summary_table(result: dict[str, Any]):
    """The console table: per k, Acc@0.5 [95% CI] of the answer, the top-k locator and the controls (a control's
    interval is over docs for its fixed draws; the draws' own spread is shown beside it)."""
    table = Table(title=f"Locator Acc@0.5 (%), {result['n_docs']} docs, intervals clustered by "
                        f"{result['clustered_by']}")
    for col in ("k", "head set", "Acc@0.5", "95% CI", "top-k minus it [95% CI]"):
        table.add_column(col)
    for row in result["rows"]:
        k = str(row["k"])
        a = row["answer"]
        table.add_row(k, "model's answer", _pct(a["mean"]), f"{_pct(a['ci_low'])}-{_pct(a['ci_high'])}",
                      _diff_text(row["topk_minus_answer"]))
        t = row["topk"]
        table.add_row(k, f"top-{k} located", _pct(t["mean"]), f"{_pct(t['ci_low'])}-{_pct(t['ci_high'])}", "")
        for kind in (k for k in KINDS if k.control and k.name in row):
            c, name = row[kind.name], kind.dashed
            if not c["draws"]:
                table.add_row(k, f"{name} located", "unavailable", "", "")
                continue
            spread = f"{_pct(min(c['per_seed']))}-{_pct(max(c['per_seed']))}"
            table.add_row(k, f"{name} located ({c['draws']} draws, each {spread})", _pct(c["mean"]),
                          f"{_pct(c['ci_low'])}-{_pct(c['ci_high'])}", _diff_text(c["topk_minus"]))
    return table


def _diff_text(d: dict[str, Any]) -> str:
    return f"{100 * d['diff']:+.1f} [{100 * d['ci_low']:+.1f}, {100 * d['ci_high']:+.1f}]"


def run_locate(args: argparse.Namespace) -> int:
    """A job of the runner with one unit (vrh_lmms.runs.runner.result_job): the same arguments into a finished
    folder do nothing and load no model. Acc@0.5 depends on the model, the heads file (its sha256 is in the
    identity), the data and these settings (the control draws are seeded), as a sweep's results do, so such a
    rerun would only repeat the figures; --force computes them again."""
    # deferred: keeps `vrh-lmms locate --help` free of statsmodels
    from vrh_lmms.runs.maps.evaluate import evaluate_sets, locate_doc, locator_sets

    try:
        ks = sorted({int(v) for v in args.k.split(",") if v.strip()})
    except ValueError:
        raise VRHError(f"--k {args.k!r}: give head-set sizes as comma-separated integers, e.g. 5,10") from None
    if not ks or ks[0] < 1:
        raise VRHError(f"--k {args.k!r}: sizes must be at least 1")
    if args.random_seeds < 0:
        raise VRHError(f"--random-seeds must be >= 0, got {args.random_seeds}")
    settings = LocatorSettings(sigma=args.sigma, threshold=parse_threshold(args.threshold))
    out = Path(args.output)
    limit = None if args.limit is None or args.limit < 0 else args.limit

    def job(tasks: list[str], heads_file):
        if ks[-1] > len(heads_file.ranking):
            raise VRHError(f"--k {ks[-1]} is more than the heads file ranks ({len(heads_file.ranking)})")
        identity = run_identity("locate", {**vars(args), "k": ks, "limit": limit}, IDENTITY, args.heads_file, tasks)
        return result_job(out, LAYOUT, RESULT, identity, "locate run")

    console.step(f"locator: {args.model} on {args.tasks}", line=False)
    run_ = prepare(args.model, args.model_args, args.tasks, args.heads_file, args.allow_cross_model, limit=limit,
                   job=job, force=args.force)
    if run_.finished:
        console.step(run_.runner.complete_note())
        return 0
    geometry = run_.lm.vrh_decoder.geometry
    dead = dead_heads_of(run_.lm, run_.heads_file)
    sets = locator_sets(run_.heads_file, geometry, ks, args.random_seeds, dead, pool=args.control_pool)
    done: dict[str, Any] = {}

    def unit(_: str) -> None:
        console.step("capturing attention maps and locating boxes")
        located: dict[tuple[str, int], dict] = {}

        def locate_and_drop(doc) -> None:  # boxes of every head set now; the doc's maps are not kept
            located[(doc.task, doc.doc_id)] = locate_doc(doc, sets, settings)
            doc.per_head = None

        docs = collect_maps(run_.lm, run_.tasks, run_.tm, None, limit, args.rows, gen_kwargs=args.gen_kwargs,
                            seed=args.seed, on_doc=locate_and_drop)
        if not docs:
            raise VRHError("no doc was captured; is the task a grounding task with images?")
        result = evaluate_sets(docs, sets, [located[(d.task, d.doc_id)] for d in docs], seed=args.seed)
        data = {"schema": SCHEMA, "model": args.model, "model_args": args.model_args, "tasks": run_.tasks,
                "heads_file": str(Path(args.heads_file).resolve()), "query_rows": args.rows,
                "locator": settings.to_dict(), "control_pool": args.control_pool, "random_seeds": args.random_seeds,
                "dead_heads": [str(h) for h in dead], **result,
                "docs": [{"task": d.task, "doc_id": d.doc_id, "image_id": d.image_id, "gt_box": list(d.gt_box),
                          "pred_box": None if d.pred_box is None else list(d.pred_box), "correct": d.correct}
                         for d in docs]}
        done.update(data=data, path=atomic.write_json(out / RESULT, data))

    run_.runner.run(unit)
    console.print_summary(summary_table(done["data"]), *console.files_table("Locator done", [
        (done["path"], "Acc@0.5 of located boxes per head set and k, every located box and IoU"),
        *console.log_row()]))
    return 0


# what the located boxes depend on, besides the heads file and the data (vrh_lmms.runs.maps.setup.run_identity)
IDENTITY = ("model", "model_args", "tasks", "limit", "k", "random_seeds", "control_pool", "rows", "sigma",
            "threshold", "gen_kwargs", "allow_cross_model", "seed")
