"""Render report.md from the report.json dict only, so every number in the markdown is in the JSON.

Accuracies and drops are shown in percentage points (x100, one decimal); p-values with three significant digits.
"""

from __future__ import annotations

from collections.abc import Iterable

from vrh_lmms.report import official_metrics


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100.0 * x:.1f}"


def pct_ci(x: float | None, low: float | None, high: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{pct(x)} [{pct(low)}, {pct(high)}]"


def pval(p: float | None) -> str:
    return "n/a" if p is None else f"{p:.3g}"


def short(model: str) -> str:
    return model.rstrip("/").split("/")[-1]


def _table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _spread(block: dict | None) -> str:
    if block is None:
        return "n/a"
    sd = "n/a" if block["acc_sd"] is None else pct(block["acc_sd"])
    return f"{pct(block['acc_mean'])} ± {sd} (n={block['n']})"


def summary_section(groups: list[dict]) -> list[str]:
    header = ["Model", "Task", "k", "Mode", "Baseline", "VRH (top-k)", "Drop [95% CI]", "Random-k (mean ± sd)",
              "p vs random", "Layer-matched (mean ± sd)", "p vs layer-matched"]
    rows = []
    for g in groups:
        for r in g["summary"]:
            ci = r["topk_drop_ci"] or [None, None]
            rows.append([short(g["model"]), g["task"], str(r["k"]), r["mode"], pct(r["baseline_acc"]),
                         pct(r["topk_acc"]), pct_ci(r["topk_drop"], *ci), _spread(r["random"]),
                         pval(r["p_random"]), _spread(r["layer_matched"]), pval(r["p_layer_matched"])])
    if not rows:
        return ["No top-k configurations with the model's own heads were found."]
    return _table(header, rows)


def configs_section(groups: list[dict]) -> list[str]:
    header = ["Model", "Task", "Config", "n", "Acc [95% CI]", "n paired", "Drop [95% CI]", "McNemar p", "Holm",
              "BH"]
    rows = []
    for g in groups:
        for c in ([g["baseline"]] if g["baseline"] else []) + g["configs"]:
            a, d, m = c["accuracy"], c["drop"], c["mcnemar"]
            rows.append([
                short(g["model"]), g["task"], c["label"], str(a["n"]), pct_ci(a["mean"], a["ci_low"], a["ci_high"]),
                "—" if c["paired"] is None else str(c["paired"]["n_paired"]),
                "—" if d is None else pct_ci(d["drop"], d["ci_low"], d["ci_high"]),
                "—" if m is None else pval(m["pvalue"]),
                "—" if m is None else pval(m["p_holm"]),
                "—" if m is None else pval(m["p_bh"]),
            ])
    return _table(header, rows)


def null_section(groups: list[dict]) -> list[str]:
    header = ["Model", "Task", "Config", "Null", "Top-k drop", "Null drop (mean ± sd)", "n null", "#null ≥ top-k",
              "p (empirical)", "p floor", "Holm", "BH"]
    rows = []
    for g in groups:
        for n in g["null_comparisons"]:
            sd = "n/a" if n["null_sd"] is None else pct(n["null_sd"])
            rows.append([short(g["model"]), g["task"], n["config"], n["null_kind"].replace("_", "-"),
                         pct(n["observed"]), f"{pct(n['null_mean'])} ± {sd}", str(n["n_null"]),
                         str(n["n_null_ge_observed"]), pval(n["pvalue"]), pval(n["p_floor"]),
                         pval(n["p_holm"]), pval(n["p_bh"])])
    if not rows:
        return ["No top-k configuration had random or layer-matched configurations of the same k and mode."]
    return _table(header, rows)


def taxonomy_section(groups: list[dict], kind: str) -> list[str]:
    wrong = "wrong" if kind == "vqa" else "mislocated"
    header = ["Model", "Task", "Config", "n", "Correct %", f"{wrong.capitalize()} %", "Parse failure %",
              f"Lost → {wrong}", "Lost → parse failure"]
    rows = []
    for g in groups:
        if g["kind"] != kind:
            continue
        for c in ([g["baseline"]] if g["baseline"] else []) + g["configs"]:
            t = c["taxonomy"]
            if t is None:
                continue
            f, lost = t["fractions"], c["lost_to"]
            rows.append([short(g["model"]), g["task"], c["label"], str(c["accuracy"]["n"]), pct(f["correct"]),
                         pct(f[wrong]), pct(f["parse_failure"]),
                         "—" if lost is None else str(lost[wrong]),
                         "—" if lost is None else str(lost["parse_failure"])])
    return _table(header, rows) if rows else []


def transfer_section(rows: list[dict]) -> list[str]:
    header = ["Model", "Task", "Config", "Heads from", "Baseline", "Own heads: acc", "Own heads: drop [95% CI]",
              "Transferred: acc", "Transferred: drop [95% CI]"]
    out = []
    for r in rows:
        own, tr = r["own"], r["transferred"]
        own_ci = (own or {}).get("drop_ci") or [None, None]
        tr_ci = tr["drop_ci"] or [None, None]
        out.append([short(r["model"]), r["task"], r["config_id"], short(r["heads_from"]), pct(r["baseline_acc"]),
                    "n/a" if own is None else pct(own["acc"]), "n/a" if own is None else pct_ci(own["drop"], *own_ci),
                    pct(tr["acc"]), pct_ci(tr["drop"], *tr_ci)])
    return _table(header, out)


def overlap_section(overlap: dict) -> list[str]:
    lines = []
    for k in overlap["k"]:
        mat = overlap["jaccard"][str(k)]
        lines += [f"Top-{k} Jaccard overlap:", ""]
        lines += _table([""] + overlap["labels"],
                        [[label] + [f"{v:.2f}" for v in row]
                         for label, row in zip(overlap["labels"], mat, strict=True)])
        lines.append("")
    return lines


def render(report: dict) -> str:
    s = report["settings"]
    groups = report["groups"]
    intro = (
        f"Created {report['created']} by vrh-lmms {report['version']}. Accuracies and drops in percentage points; "
        f"CIs at {100 * (1 - s['alpha']):.0f}%; drop CIs from {s['n_resamples']} paired bootstrap resamples of "
        f"images (seed {s['seed']}); p-values corrected over all {report['multiple_testing']['n_tests']} tests "
        f"of this report (Holm: family-wise error; BH: false discovery rate). See docs/reports.md for definitions."
    )
    out = [
        "# Visual retrieval heads: ablation report",
        "",
        intro,
        "",
        "## Baseline vs VRH (top-k) vs random heads",
        "",
        *summary_section(groups),
        "",
        *official_metrics.markdown_section(groups),
        "## Every configuration against its baseline",
        "",
        *configs_section(groups),
        "",
        "## Top-k vs random-k null",
        "",
        *null_section(groups),
        "",
    ]
    for kind, title in (("grounding", "grounding"), ("pointing", "pointing"), ("vqa", "VQA")):
        table = taxonomy_section(groups, kind)
        if table:
            out += [f"## Functional specificity: failure taxonomy ({title})", "", *table, ""]
    if report["transfer"]:
        out += ["## Cross-model transfer of heads", "", *transfer_section(report["transfer"]), ""]
    if report["overlap"]:
        out += ["## Head overlap between heads files", "", *overlap_section(report["overlap"])]
    if report["files"]["plots"]:
        out += ["## Plots", ""] + [f"![{p}]({p})" for p in report["files"]["plots"]] + [""]
    if report["warnings"]:
        out += ["## Warnings", ""] + [f"- {w}" for w in report["warnings"]] + [""]
    return "\n".join(out)
