"""Render report.md from the report.json dict only, so every number in the markdown is in the JSON.

The first page says what was found: one sentence per claim (vrh_lmms.report.claims), then how the numbers were
made, then the tables and plots. Accuracies and drops are shown in percentage points (x100, one decimal); p-values
with three significant digits. Every name a run gives (model, task, configuration, label, path) goes through
vrh_lmms.base.escape.md, so it reads as the text it is.
"""

from __future__ import annotations

from collections.abc import Iterable

from vrh_lmms.base.escape import md
from vrh_lmms.base.heads.kinds import KINDS
from vrh_lmms.base.runfolder.runs import TASK_SOURCE
from vrh_lmms.report import official_metrics
from vrh_lmms.report.fmt import pct, pct_ci, pval, short
from vrh_lmms.report.pools import pools_section

_FAMILY_NAMES = {"claims": "claims", "claims_vs_controls": "claims vs controls", "controls": "controls"}


def _table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _draws(block: dict | None) -> str:
    """Drops of control draws as mean ± SE, the standard error of the mean (R = number of draws), as the demo's
    summary gives them; never their accuracies."""
    if block is None:
        return "n/a"
    return f"{pct(block['drop_mean'])} ± {pct(block.get('drop_se'))} (R={block['n']})"


def _p_floor(p: float | None, floor: float | None) -> str:
    return "n/a" if p is None else f"{pval(p)} (floor {pval(floor)})"


def claims_section(report: dict) -> list[str]:
    if not report["claims"]:
        return ["No top-k or explicit head set was found in these runs: there is no claim to state."]
    return [f"- {c['sentence']}" for c in report["claims"]]


def methods_paragraph(report: dict) -> str:
    s = report["settings"]
    fam = report["multiple_testing"]["families"]
    counts = ", ".join(f"{_FAMILY_NAMES[name]} ({f['n_tests']} tests)" for name, f in fam.items())
    return (
        f"How these numbers were made: accuracies and drops in percentage points, intervals at "
        f"{100 * (1 - s['alpha']):g}%. The primary test of each configuration against its baseline is the cluster "
        f"sign-flip test over images (exact for 0/1 outcomes; the exact McNemar test is shown beside it and is "
        f"valid only when the expressions of an image are independent). Drop intervals: Tango's score interval on "
        f"counts divided by the design effect of the paired differences (a cluster-robust t interval for numeric "
        f"scores; a BCa bootstrap over images, {s['n_resamples']} resamples, seed {s['seed']}, is in report.json "
        f"beside each claim's). Accuracy intervals: Wilson on the design-effect-adjusted sample size "
        f"(cluster-robust t for numeric scores). "
        f"Empirical p against R control draws = (1 + #draws with a drop >= the top-k drop) / (R + 1), never below "
        f"1/(R+1). Holm and Benjamini-Hochberg within each family: {counts}. Created {report['created']} by "
        f"vrh-lmms {report['version']}; definitions in docs/reports.md."
    )


def control_docs_lines(groups: list[dict]) -> list[str]:
    """The report's first lines where control draws ran on a doc subset (`vrh-lmms sweep --control-docs N`)."""
    out = []
    for g in groups:
        sub = g["doc_set"].get("control_docs")
        if sub:
            out.append(f"**Control draws ran on {sub['n_docs']} of {sub['all_docs']} docs** of "
                       f"{md(short(g['model']))} / {md(g['task'])} (--control-docs {sub['asked']}, seed {sub['seed']}: "
                       f"whole images, {sub['n_images']} of {sub['all_images']}); baseline and top-k on all docs.")
    return out + [""] if out else []


def doc_set_lines(groups: list[dict]) -> list[str]:
    out = []
    for g in groups:
        ds = g["doc_set"]
        base = g["baseline"] or (g["configs"][0] if g["configs"] else None)
        clusters = None if base is None else base["accuracy"].get("n_clusters")
        images = f" on {clusters} images" if clusters and clusters != ds["n_docs"] else ""
        checked = ", ".join(md(c) for c in ["doc_id", *ds["checked_on"]])
        line = f"- {md(short(g['model']))} / {md(g['task'])}: every number uses the same {ds['n_docs']} docs{images}"
        if ds.get("discovery_docs_left_out"):
            line += f" (docs 0-{ds['discovery_docs_left_out'] - 1}, which discovery used, left out)"
        sub = ds.get("control_docs")
        if sub:
            line += (f" (the {sub['n_configs']} control draws: the seeded subset of {sub['n_docs']} of them, "
                     f"{sub['n_images']} images, shared by every draw; their drops are against the baseline on those "
                     "docs, intervals for the population's drop)")
        if ds["restricted"]:
            counts = ", ".join(f"{md(label)} {n}" for label, n in ds["per_run"].items())
            line += (f" — **only the docs all runs share (--intersection)**; the samples files hold {counts}")
        out.append(line + f"; runs paired on {checked}.")
    return out




def summary_section(groups: list[dict]) -> list[str]:
    """One row per own top-k; a column pair per control kind, an optional one (image-matched, vrh_lmms.base.heads.kinds)
    only when some row has such draws."""
    summaries = [r for g in groups for r in g["summary"]]
    shown = [k for k in KINDS if k.control and (not k.optional_column or any(r.get(k.name) for r in summaries))]
    kinds = [k.name for k in shown]
    header = ["Model", "Task", "Heads", "Mode", "Baseline", "Top-k acc", "Top-k drop [CI]", "Sign-flip p"]
    for kind in shown:
        header += [f"{kind.column} draws: drop (mean ± SE)", f"p vs {kind.dashed}"]
    rows = []
    for g in groups:
        for r in g["summary"]:
            ci = r["topk_drop_ci"] or [None, None]
            row = [md(short(g["model"])), md(g["task"]), md(r["heads_label"] or r["config"]), md(r["mode"]),
                   pct(r["baseline_acc"]), pct(r["topk_acc"]), pct_ci(r["topk_drop"], *ci), pval(r["p_test"])]
            for kind in kinds:
                row += [_draws(r.get(kind)), _p_floor(r.get(f"p_{kind}"), r.get(f"p_{kind}_floor"))]
            rows.append(row)
    if not rows:
        return ["No top-k configurations with the model's own heads were found."]
    return _table(header, rows)


def configs_section(groups: list[dict]) -> list[str]:
    header = ["Model", "Task", "Config", "n", "Acc [CI]", "Drop [CI]", "Sign-flip p", "Family", "Holm", "BH",
              "McNemar p (unclustered)"]
    rows = []
    for g in groups:
        for c in ([g["baseline"]] if g["baseline"] else []) + g["configs"]:
            a, d, t, m = c["accuracy"], c["drop"], c["test"], c["mcnemar"]
            rows.append([
                md(short(g["model"])), md(g["task"]), md(c["label"]), str(a["n"]),
                pct_ci(a["mean"], a["ci_low"], a["ci_high"]),
                "—" if d is None else pct_ci(d["drop"], d["ci_low"], d["ci_high"]),
                "—" if t is None else pval(t["pvalue"]),
                "—" if t is None else _FAMILY_NAMES[t["family"]],
                "—" if t is None else pval(t["p_holm"]),
                "—" if t is None else pval(t["p_bh"]),
                "—" if m is None else pval(m["pvalue"]),
            ])
    return _table(header, rows)


def null_section(groups: list[dict]) -> list[str]:
    header = ["Model", "Task", "Config", "Controls", "Top-k drop", "Draws' drop (mean ± SE; SD)", "R",
              "#draws ≥ top-k", "p (empirical)", "floor 1/(R+1)", "Holm", "BH"]
    rows = []
    for g in groups:
        for n in g["null_comparisons"]:
            spread = f"{pct(n['null_mean'])} ± {pct(n.get('null_se'))}; SD {pct(n['null_sd'])}"
            rows.append([md(short(g["model"])), md(g["task"]), md(n["config"]),
                         md(n["null_kind"].replace("_", "-")),
                         pct(n["observed"]), spread, str(n["n_null"]),
                         str(n["n_null_ge_observed"]), pval(n["pvalue"]), pval(n["p_floor"]),
                         pval(n["p_holm"]), pval(n["p_bh"])])
    if not rows:
        return ["No top-k configuration had random, layer-matched or image-matched configurations of the same k and "
                "mode."]
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
            rows.append([md(short(g["model"])), md(g["task"]), md(c["label"]), str(c["accuracy"]["n"]),
                         pct(f["correct"]),
                         pct(f[wrong]), pct(f["parse_failure"]),
                         "—" if lost is None else str(lost[wrong]),
                         "—" if lost is None else str(lost["parse_failure"])])
    return _table(header, rows) if rows else []


def transfer_section(rows: list[dict]) -> list[str]:
    header = ["Model", "Task", "Config", "Heads from", "Baseline", "Own heads: acc", "Own heads: drop [CI]",
              "Transferred: acc", "Transferred: drop [CI]", "Transferred: sign-flip p"]
    out = []
    for r in rows:
        own, tr = r["own"], r["transferred"]
        own_ci = (own or {}).get("drop_ci") or [None, None]
        tr_ci = tr["drop_ci"] or [None, None]
        out.append([md(short(r["model"])), md(r["task"]), md(r["config_id"]), md(short(r["heads_from"])),
                    pct(r["baseline_acc"]),
                    "n/a" if own is None else pct(own["acc"]), "n/a" if own is None else pct_ci(own["drop"], *own_ci),
                    pct(tr["acc"]), pct_ci(tr["drop"], *tr_ci), pval(tr["p_test"])])
    return _table(header, out)


def overlap_section(overlap: dict) -> list[str]:
    lines = []
    for k in overlap["k"]:
        mat = overlap["jaccard"][str(k)]
        lines += [f"Top-{k} Jaccard overlap:", ""]
        lines += _table([""] + [md(label) for label in overlap["labels"]],
                        [[md(label)] + [f"{v:.2f}" for v in row]
                         for label, row in zip(overlap["labels"], mat, strict=True)])
        lines.append("")
    return lines


def _pools(report: dict) -> list[str]:
    """The control-pool section, only where some model has heads that write nothing or a draw was unavailable."""
    unavailable = (report.get("pools") or {}).get("unavailable") or []
    if not unavailable and not any(g.get("dead_heads") for g in report["groups"]):
        return []
    return ["## Control pools: heads that write nothing", "", *pools_section(report["groups"], unavailable), ""]


def render(report: dict, extra_sections: list[str] = ()) -> str:
    """report.md; `extra_sections` (lines) go after the failure taxonomy (e.g. the scorer comparison)."""
    groups = report["groups"]
    out = [
        "# Visual retrieval heads: ablation report",
        "",
        *control_docs_lines(groups),
        "## What was found",
        "",
        *claims_section(report),
        "",
        methods_paragraph(report),
        "",
        *doc_set_lines(groups),
        "",
        *_pools(report),
        "## Top-k against its baseline and its control draws",
        "",
        *summary_section(groups),
        "",
        *official_metrics.markdown_section(groups),
        "## Every configuration against its baseline",
        "",
        *configs_section(groups),
        "",
        "## Top-k drop against the drops of control draws (empirical null)",
        "",
        *null_section(groups),
        "",
    ]
    for kind, title in (("grounding", "grounding"), ("pointing", "pointing"), ("vqa", "VQA")):
        table = taxonomy_section(groups, kind)
        if table:
            out += [f"## Failure taxonomy ({title})", "", *table, ""]
    out += list(extra_sections)
    if report["transfer"]:
        out += ["## Cross-model transfer of heads", "", *transfer_section(report["transfer"]), ""]
        if any(str(r["heads_from"]).startswith(TASK_SOURCE) for r in report["transfer"]):
            out += ["Rows whose heads come from `task:<task>` are cross-ablations: heads the same model's discovery "
                    "found on that task (another evidence kind), ablated on this one, beside the heads found on this "
                    "task itself.", ""]
    if report["overlap"]:
        out += ["## Head overlap between heads files", "", *overlap_section(report["overlap"])]
    if report["files"]["plots"]:
        out += ["## Plots", ""] + [f"![{md(p)}]({p})" for p in report["files"]["plots"]] + [""]
    if report["warnings"]:
        out += ["## Warnings", ""] + [f"- {md(w)}" for w in report["warnings"]] + [""]
    return "\n".join(out)
