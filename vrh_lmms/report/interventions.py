"""Report sections of the interventions: the steering table (sufficiency) and the patching map (what heads carry).

`steering_summary(folder)` turns a `vrh-lmms steer` folder into moved shares with image-clustered CIs;
`patching_markdown(result)` renders a `vrh-lmms patch` result. Both lead with a verdict sentence per claim. The CIs
are the report's own (vrh_lmms.base.stats.accuracy): Wilson on the design-effect-adjusted n for 0/1 outcomes (moved or
not), a cluster-robust t interval over images for numeric ones (recoveries).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from vrh_lmms.base import atomic
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.escape import md
from vrh_lmms.base.heads.geometry import Geometry
from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.base.heads.kinds import KINDS
from vrh_lmms.base.paths import shown_path
from vrh_lmms.base.stats import cluster_ci
from vrh_lmms.report.analysis import CONTROL_KINDS as NULL_KINDS
from vrh_lmms.report.fmt import pct, pct_ci, pval
from vrh_lmms.report.html import PATCH_MAP
from vrh_lmms.report.pools import grouped_draws
from vrh_lmms.runs.interventions.outputs import (
    PATCH_LAYOUT,
    PATCH_MANIFEST,
    STEER_LAYOUT,
    manifest_configs,
    read_steer_records,
)
from vrh_lmms.runs.interventions.outputs import PATCH_RESULT as RESULT
from vrh_lmms.runs.interventions.outputs import STEER_MANIFEST as MANIFEST

NULL_LABELS = {k.name: k.legend for k in KINDS if k.control}


def steering_summary(folder: str | Path) -> dict[str, Any]:
    """Per configuration: steerable docs, share moved onto the distractor [95% CI], share still on target; per
    (k, bias): top-k beside the mean and range of each control over seeds."""
    folder = Path(folder)
    records = read_steer_records(folder)
    configs = [c for c in manifest_configs(folder) if c.id in records]
    rows = []
    for cfg in configs:
        recs = [r for r in records[cfg.id] if r["steerable"]]
        row: dict[str, Any] = {**cfg.to_dict(), "n": len(recs), "n_docs": len(records[cfg.id])}
        if recs:
            moved = np.array([float(r["moved"]) for r in recs])
            clusters = np.array([r["image_id"] or f"doc{r['doc_id']}" for r in recs])
            row.update(moved=float(moved.mean()), moved_ci=cluster_ci(moved, clusters, "binary"),
                       on_target=float(np.mean([r["correct"] for r in recs])),
                       parse_failure=float(np.mean([r["status"] == "parse_failure" for r in recs])),
                       n_images=int(np.unique(clusters).size))
        rows.append(row)
    by_id = {r["id"]: r for r in rows}
    baseline = by_id.get("baseline")
    table = []
    for top in (r for r in rows if r["kind"] == "topk" and "moved" in r):
        entry = {"k": top["k"], "bias": top["bias"], "topk": top}
        for kind in NULL_KINDS:
            pool = [r for r in rows if r["kind"] == kind and r["k"] == top["k"] and r["bias"] == top["bias"]
                    and "moved" in r]
            if pool:
                shares = [r["moved"] for r in pool]
                entry[kind] = {"mean": float(np.mean(shares)), "min": float(min(shares)), "max": float(max(shares)),
                               "n_seeds": len(pool), "on_target": float(np.mean([r["on_target"] for r in pool]))}
        table.append(entry)
    table.sort(key=lambda e: (e["k"], e["bias"]))
    return {"folder": shown_path(folder), "configs": rows, "baseline": baseline, "table": table}


def steering_markdown(summary: dict[str, Any]) -> str:
    base = summary.get("baseline") or {}
    table = summary["table"]
    lines = ["## Steering: are the heads sufficient?", ""]
    if not table:
        return "\n".join(lines + ["No steered top-k configuration with steerable docs.", ""])
    n = table[0]["topk"]["n"]
    strongest = max(table, key=lambda e: (e["bias"], -e["k"]))
    top = strongest["topk"]
    verdict = (f"Biasing the top-{md(strongest['k'])} heads' answer rows toward another object's image tokens "
               f"(bias {strongest['bias']:g}) moves **{pct(top['moved'])}%** "
               f"[{pct(top['moved_ci'][0])}, {pct(top['moved_ci'][1])}] of {n} predictions onto that object")
    nulls = [f"{NULL_LABELS[k]} heads {pct(strongest[k]['mean'])}%" for k in NULL_KINDS if k in strongest]
    if nulls:
        verdict += "; " + ", ".join(nulls)
    if "moved" in base:
        verdict += f"; without steering {pct(base['moved'])}% already land there"
    kinds = [k for k in NULL_KINDS if any(k in e for e in table)]
    lines += [verdict + ".", "",
              "A prediction *moved* when its box has IoU >= 0.5 with the other object's box (CIs count images as "
              "clusters: Wilson on the design-effect-adjusted n). "
              "Shares in percent; controls: mean (min-max) over seeds.", "",
              "| " + " | ".join(["k", "bias", "top-k moved [95% CI]", "top-k on own target",
                                 *(f"{NULL_LABELS[k]} moved" for k in kinds)]) + " |",
              "|---|---|---|---|" + "---|" * len(kinds)]
    for e in table:
        t = e["topk"]
        cells = []
        for kind in kinds:
            c = e.get(kind)
            cells.append("-" if c is None else f"{pct(c['mean'])} ({pct(c['min'])}-{pct(c['max'])})")
        lines.append("| " + " | ".join([md(e["k"]), f"{e['bias']:g}", pct_ci(t["moved"], *t["moved_ci"]),
                                        pct(t["on_target"]), *cells]) + " |")
    if "moved" in base:
        lines += ["", f"Unsteered baseline: {pct(base['moved'])}% of {base['n']} predictions on the other object, "
                      f"{pct(base['on_target'])}% on their own target."]
    return "\n".join(lines) + "\n"


def write_steering_report(folder: str | Path) -> dict[str, Any]:
    folder = Path(folder)
    summary = steering_summary(folder)
    atomic.write_json(folder / "summary.json", summary)
    atomic.write_text(folder / "report.md", "# Steering\n\n" + steering_markdown(summary).split("\n", 2)[2])
    return summary


# ------------------------------------------------------------------------------------------------------- patching
# What a patching direction measures and how the report words it: larger = the head carries more, in both.
_MEASURE_WORDS = {
    "recovery": {"verb": "restores", "title": "patching recovery",
                 "what": "of the logit difference between A's and B's box answers"},
    "destroyed": {"verb": "destroys", "title": "share destroyed by patching",
                  "what": "of the clean run's logit difference between A's and B's box answers"},
}


def upgrade_patch_result(result: dict[str, Any]) -> dict[str, Any]:
    """A `vrh-patch/1` result (one "recovery" field in both directions) in the `vrh-patch/2` form: the noising
    direction's recovery r becomes the share destroyed 1 - r, so its numbers read the right way round."""
    if "effect" in result:
        return result
    noise = result.get("direction") == "noise"

    def conv(v):
        return None if v is None else (1.0 - v if noise else v)

    out = dict(result, measure="destroyed" if noise else "recovery")
    mean = np.asarray(result["recovery"]["mean"], dtype=float)
    out["effect"] = {"mean": (1.0 - mean if noise else mean).tolist(), "se": result["recovery"]["se"]}
    out["sets"] = [dict(s, effect=conv(s["recovery"]), ci=sorted(conv(c) for c in s["ci"]) if None not in s["ci"]
                        else s["ci"]) for s in result["sets"]]
    heads = [dict(h, effect=conv(h["recovery"])) for h in result["top_heads"]]
    out["top_heads"] = sorted(heads, key=lambda h: -h["effect"]) if noise else heads
    if noise:  # the correlation with discovery flips sign with the measure
        disc = dict(result["discovery"])
        disc["spearman"] = dict(disc["spearman"], rho=-disc["spearman"]["rho"])
        disc["kendall"] = dict(disc["kendall"], tau=-disc["kendall"]["tau"])
        out["discovery"] = disc
    return out


def patching_markdown(result: dict[str, Any], figure: str | None = None) -> str:
    result = upgrade_patch_result(result)
    g = result["geometry"]
    n_heads = Geometry.from_dict(g).total_heads  # a hybrid decoder: its attention layers' heads
    mean = np.asarray(result["effect"]["mean"])
    words = _MEASURE_WORDS[result["measure"]]
    verb = words["verb"]
    best = result["top_heads"][0]
    disc = result["discovery"]
    direction = ("from the clean run (expression naming A) into the corrupted run (naming B)"
                 if result["direction"] == "denoise" else "from the corrupted run (naming B) into the clean run")
    lines = ["## Activation patching: what do the heads carry?", "",
             f"Patching one head's answer-row output {direction} {verb} at most **{pct(best['effect'])}%** "
             f"{words['what']} ({md(best['head'])}, discovery rank "
             f"{'-' if best['discovery_rank'] is None else best['discovery_rank'] + 1}); the median head {verb} "
             f"{pct(float(np.median(mean)))}%. The map of what each head {verb} and discovery's scores "
             f"({md(disc['cell'])}) agree with "
             f"Spearman rho = {disc['spearman']['rho']:.2f} (p = {pval(disc['spearman']['p'])}) and Kendall tau = "
             f"{disc['kendall']['tau']:.2f} (p = {pval(disc['kendall']['p'])}) over {n_heads} "
             f"heads (positive: heads discovery ranks higher carry more), on {result['n_pairs_used']} pairs "
             f"({result['n_pairs']} formed; pairs whose clean and corrupted logit differences are less than "
             f"{result['min_gap']:g} apart are left out).", ""]
    sets = result["sets"]
    tops = [s for s in sets if s["kind"] == "topk"]
    if tops:
        parts = []
        for t in tops:
            text = f"top-{md(t['k'])} {pct_ci(t['effect'], *t['ci'])}%"
            for kind in NULL_KINDS:
                pool = [s["effect"] for s in sets if s["kind"] == kind and s["k"] == t["k"]]
                if pool:
                    text += f" vs {NULL_LABELS[kind]} {pct(float(np.mean(pool)))}%"
            parts.append(text)
        lines += [f"Patching head sets together {verb}: " + "; ".join(parts) + ".", ""]
    unavailable = result.get("unavailable_sets") or {}
    if unavailable:
        grouped = grouped_draws([{"folder": "", "id": k, "reason": v} for k, v in unavailable.items()])
        lines += ["Head sets that could not be drawn (not padded with heads that write nothing): "
                  + "; ".join(f"{md(ids)}: {md(reason)}" for (_, reason), ids in grouped.items())
                  + ".", ""]
    if result["measure"] == "recovery":
        formula = "recovery = (LD_patched - LD_corrupt) / (LD_clean - LD_corrupt)"
    else:
        formula = "destroyed = (LD_clean - LD_patched) / (LD_clean - LD_corrupt)"
    lines += [f"Metric: {md(result['metric'])}; {md(result['rows'])}; {formula}. Mean over pairs; CIs: "
              "cluster-robust t over images (a zero-width interval marked * means every pair gave the same value).", ""]
    if figure:
        lines += [f"![{words['title']} beside discovery scores]({figure})", ""]
    lines += [f"| head set | heads | {result['measure']} % [95% CI] |", "|---|---|---|"]
    for s in sets:
        flag = " *" if s.get("degenerate") else ""
        lines.append(f"| {md(s['id'])} | {len(s['heads'])} | {pct_ci(s['effect'], *s['ci'])}{flag} |")
    lines += ["", f"Heads that {verb.rstrip('s')} the most ({result['measure']} %, standard error over pairs, rank in "
                  "discovery):", "",
              f"| head | {result['measure']} % | se | discovery rank |", "|---|---|---|---|"]
    for h in result["top_heads"][:10]:
        rank = "-" if h["discovery_rank"] is None else h["discovery_rank"] + 1
        lines.append(f"| {md(h['head'])} | {pct(h['effect'])} | {pct(h['se'])} | {rank} |")
    overlap = disc.get("topk_overlap") or {}
    if overlap:
        lines += ["", f"Top-k overlap of the {result['measure']} ranking with discovery's ranking: "
                  + ", ".join(f"k={md(k)}: {pct(v)}%" for k, v in overlap.items()) + "."]
    return "\n".join(lines) + "\n"


def patching_plot(result: dict[str, Any], scores: np.ndarray, path: Path) -> Path:

    result = upgrade_patch_result(result)
    mean = np.asarray(result["effect"]["mean"])
    layers, heads = mean.shape
    fig, axes = plt.subplots(1, 2, figsize=(2.2 + 0.35 * heads * 2, 1.6 + 0.3 * layers), squeeze=False)
    for ax, data, title in ((axes[0, 0], scores, "discovery score"),
                            (axes[0, 1], mean, _MEASURE_WORDS[result["measure"]]["title"])):
        im = ax.imshow(data, aspect="auto", cmap="viridis", origin="lower")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    with atomic.atomic_file(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return path


def write_patching_report(folder: str | Path, result: dict[str, Any] | None = None, hf=None) -> Path:
    """report.md and patch_map.png of a patching folder; `result` and `hf` default to its patch.json and the heads
    file it names."""
    folder = Path(folder)
    if result is None:
        result = json.loads((folder / "patch.json").read_text())
    if hf is None:
        hf = load_heads_file(json.loads((folder / PATCH_MANIFEST).read_text())["heads_file"])
    patching_plot(result, np.asarray(hf.scores, dtype=float), folder / "patch_map.png")
    text = patching_markdown(result, "patch_map.png")
    return atomic.write_text(folder / "report.md", "# Activation patching\n\n" + text.split("\n", 2)[2])


def check_sources(steer_dir: str | Path | None = None, patch_dir: str | Path | None = None) -> None:
    """`report --steer/--patch`: each folder holds a finished run of its command (checked before the report is
    built, so a wrong path costs no statistics)."""
    if steer_dir is not None and not STEER_LAYOUT[MANIFEST](Path(steer_dir) / MANIFEST):
        raise VRHError(f"--steer {steer_dir}: no {MANIFEST} of `vrh-lmms steer` there")
    if patch_dir is not None:
        patch_dir = Path(patch_dir)
        if not PATCH_LAYOUT[RESULT](patch_dir / RESULT) or not (patch_dir / "patch_map.png").is_file():
            raise VRHError(f"--patch {patch_dir}: no finished `vrh-lmms patch` run there ({RESULT} and "
                           "patch_map.png)")


def append_to_report(report_dir: str | Path, steer_dir: str | Path | None = None,
                     patch_dir: str | Path | None = None) -> Path:
    """Add the steering table and the patching map to a built report (report.md and interventions.md; the map
    is copied into plots/). Every file is written atomically."""
    check_sources(steer_dir, patch_dir)
    report_dir = Path(report_dir)
    sections = []
    if steer_dir is not None:
        sections.append(steering_markdown(steering_summary(steer_dir)))
    if patch_dir is not None:
        result = json.loads((Path(patch_dir) / "patch.json").read_text())
        atomic.write_bytes(report_dir / PATCH_MAP, (Path(patch_dir) / "patch_map.png").read_bytes())
        sections.append(patching_markdown(result, PATCH_MAP))
    text = "\n".join(sections)
    atomic.write_text(report_dir / "interventions.md", "# Interventions\n\n" + text)
    report = report_dir / "report.md"
    if report.is_file():
        atomic.write_text(report, report.read_text().rstrip("\n") + "\n\n" + text)
    return report_dir / "interventions.md"
