"""`vrh-lmms demo` recall step: are the demo VLM's retrieval heads its text backbone's?

Three head sets of one geometry: the text-recall heads of the shipped text-pretrained backbone (`demo_backbone`,
discovered on the text-needle task, text only), the demo VLM's own text-recall heads (same task) and its grounding
heads (the demo's discovery). Text-recall heads are ranked by the copy-paste `retrieval` cell (Wu et al.; on the demo
model the needle-mass cell does not find causal recall heads, docs/evidence.md). The step reports their top-k overlap
(`compare-heads`, chance over all heads and over the VLM's live heads) and a causal cross-ablation: each set's top-k
masked in the VLM on both tasks, beside random live-head draws on the needle task (the demo's sweep holds the
grounding draws). The sweeps go into the demo's report, whose transfer table shows them beside each task's own heads
(`top5@demo_backbone`, `top5@task:...`). A weak or null overlap is a finding and is printed as measured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.escape import md, md_code
from vrh_lmms.base.heads.plan import plan_configurations
from vrh_lmms.base.paths import assets_path, shown_path
from vrh_lmms.pipelines.demo.stages import DemoSettings, demo_model_args, scoped_env, sweep_heads
from vrh_lmms.report.compare_plots import score_maps_plot
from vrh_lmms.report.fmt import pct
from vrh_lmms.report.head_compare import compare, load_inputs

RECALL_DIR = "recall"
BACKBONE = "demo_backbone"  # under vrh_lmms/assets/
NEEDLE_TASK = "vrh_synth_text_needle"
RECALL_CELL = "retrieval"
MAPS_PLOT = "score_maps.png"  # the three sets' score maps (compare-heads' plot), in the recall folder
NEEDLE_DISCOVERY = {"n": 100, "seed": 0}  # the task's defaults: recall format, 8 facts, 8 practice queries
NEEDLE_EVAL = {"n": 100, "seed": 1}  # held-out haystacks
NEEDLE_GEN = "max_new_tokens=6"
SETS = ("backbone_recall", "vlm_recall", "grounding")  # head sets, in the order the summary prints them
LABELS = {"backbone_recall": "backbone text-recall", "vlm_recall": "VLM text-recall", "grounding": "VLM grounding"}
SWEEPS = {  # folder -> (task, head set); the needle sweep of the VLM's own recall heads also holds the random draws
    "sweep_needle": ("needle", "vlm_recall"),
    "sweep_needle_backbone_heads": ("needle", "backbone_recall"),
    "sweep_needle_grounding_heads": ("needle", "grounding"),
    "sweep_grounding_recall_heads": ("grounding", "vlm_recall"),
    "sweep_grounding_backbone_heads": ("grounding", "backbone_recall"),
}


def backbone_path() -> Path:
    path = assets_path() / BACKBONE
    if not (path / "config.json").is_file():
        raise VRHError(f"the shipped demo backbone is missing from {path}; reinstall vrh-lmms")
    return path


def needle_discovery(lm, model_args: str, output: Path) -> Path:
    """Text-recall heads: discovery on the needle task, ranked by the copy-paste `retrieval` cell."""
    # deferred: keeps `vrh-lmms demo --help` free of torch
    from vrh_lmms.runs.discovery.run import DiscoverySpec, run_discovery

    lm.batch_size_per_gpu = 1  # discovery captures one doc at a time (the demo's sweep left it at its batch size)
    with scoped_env(VRH_NEEDLE_CONFIG=json.dumps(NEEDLE_DISCOVERY)):
        return Path(run_discovery(DiscoverySpec(model="vrh_qwen25", model_args=model_args, tasks=[NEEDLE_TASK],
                                                output=str(output), limit=None, primary=RECALL_CELL,
                                                gen_kwargs=NEEDLE_GEN), lm=lm))


def run_recall(lm, model_args: str, grounding_heads: Path, spec, settings: DemoSettings, k: int, out: Path, say,
               progress: bool) -> list[Path]:
    """Both discoveries, the overlap and the cross-ablation sweeps; returns the sweep folders for the report."""
    # deferred: keeps `vrh-lmms demo --help` free of torch
    from vrh_lmms.harness import lmms

    folder = out / RECALL_DIR
    backbone = backbone_path()
    say(f"[+] recall heads: the text backbone's and the VLM's on the text-needle task, against the grounding heads "
        f"(k = {k})")
    lm_backbone = lmms.build_model("vrh_qwen25", demo_model_args(backbone, spec), batch_size=1)
    heads = {"backbone_recall": needle_discovery(lm_backbone, demo_model_args(backbone, spec),
                                                 folder / "backbone" / "heads.json"),
             "vlm_recall": needle_discovery(lm, model_args, folder / "vlm" / "heads.json"),
             "grounding": grounding_heads}
    del lm_backbone
    own = plan_configurations([k], settings.random_seeds, False, ["zero"])
    top_only = [c for c in plan_configurations([k], 0, False, ["zero"]) if c.kind != "baseline"]
    for name, (task, head_set) in SWEEPS.items():
        configs = own if name == "sweep_needle" else top_only
        needle = {"task": NEEDLE_TASK, "data": {"VRH_NEEDLE_CONFIG": json.dumps(NEEDLE_EVAL)},
                  "gen_kwargs": NEEDLE_GEN} if task == "needle" else {}
        sweep_heads(lm, model_args, spec, settings, heads[head_set], configs, folder / name, progress, **needle)
    return [folder / name for name in SWEEPS]


def heads_files(out: Path, grounding_heads: Path) -> dict[str, Path]:
    folder = out / RECALL_DIR
    return {"backbone_recall": folder / "backbone" / "heads.json", "vlm_recall": folder / "vlm" / "heads.json",
            "grounding": grounding_heads}


def overlap_figures(files: dict[str, Path], k: int, plot: Path | None = None) -> list[dict[str, Any]]:
    """`compare-heads` on each pair of the three sets at k: overlap, chance and p over all heads and over the
    VLM's live heads, Spearman of the score maps (all heads, live heads); `plot`: the three score maps there."""
    cells = [RECALL_CELL, RECALL_CELL, None]  # grounding: the demo discovery's primary cell
    items = load_inputs([str(files[s]) for s in SETS], cells)
    for item, s in zip(items, SETS, strict=True):
        item.label = LABELS[s]
    block = compare(items, k)
    if plot is not None:
        score_maps_plot(items, block, plot)
    rows = []
    pairs = [(a, b) for i, a in enumerate(SETS) for b in SETS[i + 1:]]
    for (a, b), pair in zip(pairs, block["pairs"], strict=True):
        rows.append({"a": a, "b": b} | {key: pair.get(key) for key in (
            "k", "overlap", "shared", "chance", "p_value", "spearman", "spearman_live", "n_live", "overlap_live",
            "shared_live", "chance_live", "p_value_live")})
    return rows


def _group(report: dict[str, Any], task: str) -> dict[str, Any] | None:
    return next((g for g in report["groups"] if g["task"] == task), None)


def _brief(group: dict[str, Any], label: str, null_kind: str = "random") -> dict[str, Any] | None:
    cfg = next((c for c in group["configs"] if c["label"] == label), None)
    if cfg is None:
        return None
    comp = next((n for n in group["null_comparisons"] if n["config"] == label and n["null_kind"] == null_kind), None)
    drop = cfg["drop"]
    return {"label": label, "heads": cfg.get("heads"), "acc": cfg["accuracy"]["mean"],
            "drop": None if drop is None else drop["drop"],
            "drop_ci": None if drop is None else [drop["ci_low"], drop["ci_high"]],
            "p_random": None if comp is None else comp["pvalue"],
            "random_drops": None if comp is None else comp["null_drops"]}


def ablation_figures(report: dict[str, Any], k: int, grounding_task: str, backbone_name: str) -> dict[str, Any]:
    """Per task: the baseline and each head set's top-k drop [CI] with its empirical p against the random live draws
    of that task, read from the demo report (its labels: own heads plain, the others `@<model>` / `@task:<task>`)."""
    out: dict[str, Any] = {}
    for task, name, own in (("needle", NEEDLE_TASK, "vlm_recall"), ("grounding", grounding_task, "grounding")):
        group = _group(report, name)
        if group is None:
            continue
        other_task = grounding_task if task == "needle" else NEEDLE_TASK
        labels = {own: f"top{k}", "backbone_recall": f"top{k}@{backbone_name}",
                  ("grounding" if task == "needle" else "vlm_recall"): f"top{k}@task:{other_task}"}
        base = group["baseline"]
        out[task] = {"task": name, "baseline": None if base is None else base["accuracy"]["mean"],
                     "n": None if base is None else base["accuracy"]["n"],
                     "sets": {s: _brief(group, labels[s]) for s in SETS}}
    return out


def dead_in_vlm(files: dict[str, Path], k: int) -> list[str]:
    """The backbone's top-k text-recall heads that the VLM's pruning left writing nothing."""
    backbone, vlm = load_inputs([str(files["backbone_recall"]), str(files["vlm_recall"])], RECALL_CELL)
    return [h for h in backbone.ranking[:k] if h in (vlm.dead or frozenset())]


def recall_summary(out: Path, grounding_heads: Path, report: dict[str, Any], k: int, grounding_task: str) -> dict:
    files = heads_files(out, grounding_heads)
    return {"k": k, "cell": RECALL_CELL, "overlap": overlap_figures(files, k, out / RECALL_DIR / MAPS_PLOT),
            "ablation": ablation_figures(report, k, grounding_task, BACKBONE),
            "backbone_top_dead_in_vlm": dead_in_vlm(files, k),
            # relative to the demo's folder, as every path of a shared summary
            "heads_files": {s: shown_path(p, out) for s, p in files.items()}}


def _p(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2g}"


def recall_line(summary: dict[str, Any]) -> str:
    """The one-line verdict: overlaps against chance, then what each set's top-k costs each task."""
    k = summary["k"]
    parts = []
    for r in summary["overlap"]:
        live = "" if r.get("overlap_live") is None else \
            f"; {r['overlap_live']} among live heads (chance {r['chance_live']:.2f}, p = {_p(r['p_value_live'])})"
        names = f" [{', '.join(md(h) for h in r['shared'])}]" if r["shared"] else ""
        parts.append(f"{LABELS[r['a']]} vs {LABELS[r['b']]} {r['overlap']} of {k}{names} (chance {r['chance']:.2f}, "
                     f"p = {_p(r['p_value'])}{live})")
    costs = []
    for task, block in summary["ablation"].items():
        sets = ", ".join(f"{LABELS[s]} {pct(b['acc'])}" for s, b in block["sets"].items() if b is not None)
        costs.append(f"{md(task)} {pct(block['baseline'])} -> {sets}")
    return (f"Recall heads (top-{k}, {md_code(summary['cell'])} cell for text recall): shared " + "; ".join(parts) +
            ". Masked in the VLM: " + "; ".join(costs) + ".")


def recall_markdown(summary: dict[str, Any], plot: str | None) -> str:
    k = summary["k"]
    lines = ["", "## Recall heads: the text backbone, the VLM's text recall, grounding", "", recall_line(summary), ""]
    dead = summary["backbone_top_dead_in_vlm"]
    if dead:
        listed = ", ".join(md(h) for h in dead)
        lines += [f"{len(dead)} of the backbone's top-{k} text-recall heads ({listed}) write nothing in the "
                  "VLM: its joint training pruned them, so masking them there costs nothing by construction.", ""]
    lines += ["| head set masked (top-%d) | task | accuracy | drop [95%% CI] | random live draws: drops (R) | "
              "empirical p vs random |" % k, "|---|---|---|---|---|---|"]
    for block in summary["ablation"].values():
        lines.append(f"| none (baseline) | {md(block['task'])} | {pct(block['baseline'])} | | | |")
        for s, b in block["sets"].items():
            if b is None:
                continue
            ci = "" if not b["drop_ci"] or b["drop_ci"][0] is None else \
                f" [{pct(b['drop_ci'][0])}, {pct(b['drop_ci'][1])}]"
            rnd = "n/a" if not b["random_drops"] else \
                f"{pct(min(b['random_drops']))} to {pct(max(b['random_drops']))} ({len(b['random_drops'])})"
            lines.append(f"| {LABELS[s]} | {md(block['task'])} | {pct(b['acc'])} | {pct(b['drop'])}{ci} | {rnd} | "
                         f"{_p(b['p_random'])} |")
    lines += ["", "| pair | top-%d shared (chance, p) | live top-%d shared (chance, p) | Spearman (all / live) |"
              % (k, k), "|---|---|---|---|"]
    for r in summary["overlap"]:
        live = "n/a" if r.get("overlap_live") is None else \
            f"{r['overlap_live']} ({r['chance_live']:.2f}, {_p(r['p_value_live'])})"
        sp = "n/a" if r["spearman"] is None else f"{r['spearman']:.2f}" + (
            "" if r.get("spearman_live") is None else f" / {r['spearman_live']:.2f}")
        lines.append(f"| {LABELS[r['a']]} vs {LABELS[r['b']]} | {r['overlap']} ({r['chance']:.2f}, "
                     f"{_p(r['p_value'])}) | {live} | {sp} |")
    lines += ["", "Text-recall heads are ranked by the copy-paste `retrieval` score on the text-needle task "
              f"({NEEDLE_DISCOVERY['n']} haystacks, seed {NEEDLE_DISCOVERY['seed']}); the needle sweeps use "
              f"{NEEDLE_EVAL['n']} held-out haystacks (seed {NEEDLE_EVAL['seed']}). Chance and p: hypergeometric, over "
              "all heads and over the VLM's live heads (each ranking without its dead heads). Empirical p: the share "
              "of random live draws on that task dropping at least as much (floor 1/(R+1)). The report's transfer "
              "table holds the same runs."]
    if plot:
        lines += ["", f"![recall heads]({plot})", "", f"![score maps of the three sets]({RECALL_DIR}/{MAPS_PLOT})"]
    return "\n".join(lines) + "\n"


def plot_recall(summary: dict[str, Any], path: Path) -> Path:
    """Drops of each head set's top-k on both tasks, with the random live draws of the needle task as points."""

    tasks = list(summary["ablation"])
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.4), squeeze=False)
    colours = {"backbone_recall": "#7b68ee", "vlm_recall": "#2e8b57", "grounding": "#d2691e"}
    for ax, task in zip(axes[0], tasks, strict=True):
        block = summary["ablation"][task]
        names = [s for s in SETS if block["sets"].get(s) is not None]
        drops = [100 * (block["sets"][s]["drop"] or 0.0) for s in names]
        x = np.arange(len(names))
        ax.bar(x, drops, color=[colours[s] for s in names])
        for s, xi in zip(names, x, strict=True):
            ci = block["sets"][s]["drop_ci"]
            if ci and ci[0] is not None:
                d = 100 * block["sets"][s]["drop"]
                ax.errorbar(xi, d, yerr=[[d - 100 * ci[0]], [100 * ci[1] - d]], color="black", capsize=3, lw=1)
        rnd = next((block["sets"][s]["random_drops"] for s in names if block["sets"][s]["random_drops"]), None)
        if rnd:
            ax.axhspan(100 * min(rnd), 100 * max(rnd), color="grey", alpha=0.2, zorder=0)
        ax.set_xticks(x, [LABELS[s].replace(" ", "\n", 1) for s in names], fontsize=8)
        ax.set_title(f"{block['task']} (baseline {pct(block['baseline'])})", fontsize=9)
        ax.set_ylabel(f"drop when the top-{summary['k']} are masked (points)", fontsize=8)
        ax.axhline(0, color="black", lw=0.5)
    fig.suptitle("Which heads recall what: text backbone vs VLM (grey band: the range of "
                 f"{summary['k']} random live heads' drops)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
