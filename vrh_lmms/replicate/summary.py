"""replicate.md: what the replication found, one verdict per claim, then the paper's numbers beside ours.

Everything is read from the report (`vrh_lmms.report.build`: cluster-aware intervals and tests) and the stages'
records in replicate.json; nothing is recomputed here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from vrh_lmms import atomic
from vrh_lmms.replicate.paper_figures import match_paper_model, paper_row
from vrh_lmms.replicate.plan import ReplicateSpec


def _pct(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def _acc_ci(acc: dict[str, Any] | None) -> str:
    if not acc:
        return "n/a"
    return f"{_pct(acc['mean'])} [{_pct(acc['ci_low'])}, {_pct(acc['ci_high'])}]"


def _control(row: dict[str, Any], kind: str) -> tuple[float, float, int] | None:
    """(mean accuracy, its standard error over draws, draws) of a control kind at one k."""
    spread = row.get(kind)
    if not spread or not spread.get("n") or row.get("baseline_acc") is None:
        return None
    se = spread["drop_sd"] / math.sqrt(spread["n"]) if spread["n"] > 1 else float("nan")
    return row["baseline_acc"] - spread["drop_mean"], se, spread["n"]


def _control_text(row: dict[str, Any], kind: str) -> str:
    c = _control(row, kind)
    return "n/a" if c is None else f"{_pct(c[0])} ± {_pct(c[1])} ({c[2]} draws)"


def _group(report: dict[str, Any], task: str) -> dict[str, Any] | None:
    for g in report["groups"]:
        if g["task"] == task:
            return g
    return None


def _own_rows(group: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {r["k"]: r for r in group["summary"] if r["mode"] == "zero"}


def _topk_config(group: dict[str, Any], k: int) -> dict[str, Any] | None:
    return next((c for c in group["configs"] if c["kind"] == "topk" and c["k"] == k and c["mode"] == "zero"
                 and c["heads_source"] is None), None)


def verdicts(spec: ReplicateSpec, report: dict[str, Any], stages: dict[str, Any]) -> list[str]:
    """One sentence per claim of the paper that this run tested, with the test behind it."""
    out = []
    task = spec.grounding_tasks[0]
    group = _group(report, task)
    if group is not None:
        rows = _own_rows(group)
        k = max(rows)
        row = rows[k]
        outside = _control(row, "random_outside")
        collapse = row["topk_acc"] is not None and row["baseline_acc"] and row["topk_acc"] < 0.5 * row["baseline_acc"]
        beats = outside is not None and row["p_random_outside"] is not None and row["p_random_outside"] <= 0.05
        out.append(
            f"**Masking the top-{k} heads {'collapses' if collapse else 'does not collapse'} grounding** on {task}: "
            f"Acc@0.5 {_pct(row['baseline_acc'])} → {_pct(row['topk_acc'])} (drop CI "
            f"{_pct(row['topk_drop_ci'][0])} to {_pct(row['topk_drop_ci'][1])}; cluster sign-flip p = "
            f"{row['p_test']:.2g}); random-{k} outside the top-{k}: {_control_text(row, 'random_outside')}, "
            + ("beaten by the top-k at empirical p = " if beats else "empirical p against it = ")
            + (f"{row['p_random_outside']:.3g}." if row["p_random_outside"] is not None else "n/a."))
        kcurve = sorted(rows)
        first = next((kk for kk in kcurve if rows[kk]["topk_acc"] is not None and rows[kk]["baseline_acc"]
                      and rows[kk]["topk_acc"] < 0.5 * rows[kk]["baseline_acc"]), None)
        out.append("**Where the curve collapses:** " + (
            f"accuracy first falls below half the baseline at k = {first} (paper, Qwen2.5-VL-7B: between k = 5 "
            "and 10)." if first is not None else "it never falls below half the baseline on this grid."))
    out += scorer_verdicts(report, task)
    for vqa_task in spec.vqa_tasks:
        g = _group(report, vqa_task)
        if g is None or not g["summary"]:
            continue
        row = _own_rows(g)[spec.vqa_k]
        outside = _control(row, "random_outside")
        hurt = row["p_test"] is not None and row["p_test"] <= 0.05 and row["topk_drop"] > 0
        out.append(
            f"**Cross-task ({vqa_task}): masking the grounding heads {'hurts' if hurt else 'does not hurt'} VQA**: "
            f"{_pct(row['baseline_acc'])} → {_pct(row['topk_acc'])} (sign-flip p = {row['p_test']:.2g}); random-"
            f"{spec.vqa_k} outside: {_control_text(row, 'random_outside')}. The paper reports VQA breaking too "
            "(Table 3)." + ("" if hurt else " Not reproduced here: reported as measured."))
    eff = stages.get("efficiency")
    if eff and eff.get("rows"):
        rows = eff["rows"]
        enough = next((r["n"] for r in rows if r["mean_overlap"] >= 0.8), None)
        out.append(f"**Sample efficiency:** the top-{eff['k']} from n docs shares "
                   + (f"at least 80% of its heads with the all-docs top-{eff['k']} from n = {enough} on"
                      if enough is not None else f"less than 80% of its heads with the all-docs top-{eff['k']} "
                      "at every n tried")
                   + " (paper: 5-10 samples suffice).")
    return out


def scorer_verdicts(report: dict[str, Any], task: str) -> list[str]:
    """Fig 2/3: does the primary cell's top-k hurt most at the largest k? (the report's scorer table)"""
    block = next((b for b in report.get("scorers", []) if b["task"] == task), None)
    if block is None:
        return []
    k = str(max(block["ks"]))
    rows = [r for r in block["rows"] if r["cell"] is not None and k in r["by_k"]]
    if not rows:
        return []
    primary = rows[0]
    ranked = sorted(rows, key=lambda r: r["by_k"][k]["acc"])
    others = ", ".join(f"{r['label']} {_pct(r['by_k'][k]['acc'])}" for r in ranked if r is not primary)
    lowest = ranked[0] is primary or ranked[0]["by_k"][k]["acc"] == primary["by_k"][k]["acc"]
    return [f"**Scorers compared at k = {k} (Figs 2/3/8b, Table A8): the primary cell's heads "
            f"{'are' if lowest else 'are not'} the most causal**: masking them leaves "
            f"{_pct(primary['by_k'][k]['acc'])}; the other cells' top-{k}: {others} (paper: Q_out + sum + mean "
            "finds the most causal heads). Table and plot: report.md, \"Scoring cells compared\"."]


def paper_table(spec: ReplicateSpec, report: dict[str, Any]) -> list[str]:
    """The first table: this run beside the paper, for the same model where the paper has it."""
    from vrh_lmms.preload import parse_model_args

    pretrained = parse_model_args(spec.model_args).get("pretrained")
    name = match_paper_model(pretrained)
    paper = paper_row(name)
    group = _group(report, spec.grounding_tasks[0])
    lines = [f"Model: `{pretrained}`; " + (f"the paper's **{name}**." if name else
                                          "the paper has no figures for this model: its column shows the paper's "
                                          "Qwen2.5-VL-7B for scale, not as a target."),
             ""]
    if paper is None:
        paper = paper_row("Qwen2.5-VL-7B")
    if group is None:
        return lines + ["(no grounding results yet)"]
    rows = _own_rows(group)
    k = 20 if 20 in rows else max(rows)
    row = rows[k]
    lines += [f"| {spec.grounding_tasks[0]}, Acc@0.5 % | this run (95% CI) | paper (RefCOCO val) |",
              "|---|---|---|",
              f"| baseline | {_acc_ci(group['baseline']['accuracy'] if group['baseline'] else None)} | "
              f"{paper['base']} |",
              f"| random-{k} outside the top-{k} | {_control_text(row, 'random_outside')} | {paper['random20']} |",
              f"| random-{k} (live heads) | {_control_text(row, 'random')} | n/a |",
              f"| top-{k} VRHs | {_acc_ci((_topk_config(group, k) or {}).get('accuracy'))} | {paper['vrh20']} |"]
    curve = paper.get("kcurve") or {}
    lines += ["", "| k | top-k (this run) | random-k outside (this run) | paper top-k |", "|---|---|---|---|",
              f"| 0 | {_pct(row['baseline_acc'])} | | {curve.get(0, 'n/a')} |"]
    for kk in sorted(rows):
        lines.append(f"| {kk} | {_acc_ci((_topk_config(group, kk) or {}).get('accuracy'))} | "
                     f"{_control_text(rows[kk], 'random_outside')} | {curve.get(kk, 'n/a')} |")
    return lines


def vqa_table(spec: ReplicateSpec, report: dict[str, Any]) -> list[str]:
    lines = [f"| task | baseline | random-{spec.vqa_k} outside | top-{spec.vqa_k} VRHs |", "|---|---|---|---|"]
    for task in spec.vqa_tasks:
        g = _group(report, task)
        if g is None or spec.vqa_k not in _own_rows(g):
            continue
        row = _own_rows(g)[spec.vqa_k]
        lines.append(f"| {task} | {_acc_ci(g['baseline']['accuracy'] if g['baseline'] else None)} | "
                     f"{_control_text(row, 'random_outside')} | "
                     f"{_acc_ci((_topk_config(g, spec.vqa_k) or {}).get('accuracy'))} |")
    return lines


def write_summary(out: Path, spec: ReplicateSpec, report: dict[str, Any]) -> Path:
    manifest = json.loads((out / "replicate.json").read_text()) if (out / "replicate.json").is_file() else {}
    stages = manifest.get("stages", {})
    text = ["# Replication of the paper's protocol", "", "## What was found", ""]
    text += [f"- {v}" for v in verdicts(spec, report, stages)]
    text += ["", "## This run beside the paper", ""] + paper_table(spec, report)
    if spec.vqa_tasks:
        text += ["", "## Cross-task (Table 3)", ""] + vqa_table(spec, report)
    text += ["", "## Files", "",
             "- `report/report.html`, `report/report.md`: every configuration with intervals, tests and plots",
             "- `heads.json`: the detected heads (all scoring cells); `efficiency/efficiency.png`: Fig 8c",
             "- `sweeps/`: one lmms-eval results folder per configuration; `replicate.json`: stages and timings"]
    if (out / "maps").is_dir():
        text.append("- `maps/map_*.png`: attention over the image, all heads / top-k / all but the top-k (Figs A1/A2)")
    if (out / "partner").is_dir():
        text.append("- `partner/heads.json`, `sweeps/transfer_*`: transfer between the two models (Fig 7)")
    text += ["", "Stage times (s): " + ", ".join(f"{k} {v.get('seconds', '?')}" for k, v in stages.items())]
    return atomic.write_text(out / "replicate.md", "\n".join(text) + "\n")
