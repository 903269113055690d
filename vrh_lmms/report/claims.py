"""One sentence per claim for the first page of report.md: which heads, which drop, which test, which controls.

A claim is a top-k (own or transferred heads) or explicit head set of one model x task. The sentence quotes only
numbers of report.json and says "significant" only for a p-value at or below alpha after Holm within its family;
an empirical p against R control draws is always quoted with R and its floor 1/(R+1), and flagged when that floor
is above alpha (too few draws to support a claim at that level). The sentence is markdown: the names in it are
escaped (vrh_lmms.base.escape.md).
"""

from __future__ import annotations

from vrh_lmms.base.escape import md
from vrh_lmms.report.analysis import CONTROL_KINDS, CONTROL_NAMES
from vrh_lmms.report.fmt import pct, pval, short

_KIND_NAMES = CONTROL_NAMES
_LISTED_HEADS = 8


def _heads(cfg: dict) -> str:
    heads = cfg.get("heads") or []
    if not heads:
        return ""
    listed = ", ".join(md(h) for h in heads[:_LISTED_HEADS]) + (", ..." if len(heads) > _LISTED_HEADS else "")
    return f" [{listed}]"


def _verdict(p_holm: float | None, alpha: float, m: int) -> str:
    if p_holm is None:
        return ""
    level = f"{100 * alpha:g}%"
    word = "significant" if p_holm <= alpha else "not significant"
    return f" (Holm over {m} claim{'s' if m != 1 else ''}: {pval(p_holm)}, {word} at {level})"


def _controls(group: dict, cfg: dict, alpha: float, n_family: int) -> str:
    comps = [n for n in group["null_comparisons"] if n["config"] == cfg["label"]]
    if not comps:
        return ("no random, layer-matched or image-matched draws of this k and mode, so nothing here says whether "
                "other heads would do the same")
    parts = []
    for kind in CONTROL_KINDS:
        comp = next((n for n in comps if n["null_kind"] == kind), None)
        if comp is None:
            continue
        r = comp["n_null"]
        larger = r - comp["n_null_ge_observed"]
        text = (f"larger than {larger} of {r} {_KIND_NAMES[kind]} draws (mean drop {pct(comp['null_mean'])}; "
                f"empirical p = {pval(comp['pvalue'])}, R = {r}, floor 1/(R+1) = {pval(comp['p_floor'])}")
        if comp["p_floor"] > alpha:
            text += f", too few draws to reach p <= {alpha:g}"
        elif comp["p_holm"] is not None:
            word = "significant" if comp["p_holm"] <= alpha else "not significant"
            text += (f"; Holm over the {n_family} comparisons with controls: {pval(comp['p_holm'])}, {word} at "
                     f"{100 * alpha:g}%")
        parts.append(text + ")")
    return " and ".join(parts)


def claim_sentence(group: dict, cfg: dict, alpha: float, families: dict) -> str:
    where = f"{md(short(group['model']))} / {md(group['task'])}"
    name = md(cfg["heads_label"] or cfg["label"])
    mode = f"{md(cfg['mode'])}-ablated" if cfg["mode"] else "ablated"
    head = f"**{name}**{_heads(cfg)} on {where}, {mode}"
    acc = cfg["accuracy"]
    if group["baseline"] is None or cfg["drop"] is None:
        return (f"{head}: {md(group['metric'])} {pct(acc['mean'])} on {acc['n']} docs; no baseline run, so no drop and "
                f"no test.")
    base = group["baseline"]["accuracy"]
    d, t = cfg["drop"], cfg["test"]
    images = (f"{t['n_clusters']} images" if cfg["paired"]["clustered_by"] == "image_id"
              else f"{t['n_pairs']} docs (no image ids)")
    level = f"{100 * (1 - alpha):g}%"
    sentence = (f"{head}: {md(group['metric'])} {pct(base['mean'])} → {pct(acc['mean'])}, a drop of {pct(d['drop'])} "
                f"points ({level} CI {pct(d['ci_low'])} to {pct(d['ci_high'])}); cluster sign-flip test over {images} "
                f"p = {pval(t['pvalue'])}{_verdict(t['p_holm'], alpha, families['claims']['n_tests'])}")
    if cfg["kind"] == "topk":
        sentence += "; against controls: " + _controls(group, cfg, alpha, families["claims_vs_controls"]["n_tests"])
    return sentence + "."


def build_claims(groups: list[dict], alpha: float, families: dict) -> list[dict]:
    """The claims of the report in group order, each with its sentence."""
    out = []
    for group in groups:
        for cfg in group["configs"]:
            if cfg["kind"] in CONTROL_KINDS or cfg["kind"] == "baseline":
                continue
            out.append({"model": group["model"], "task": group["task"], "config": cfg["label"],
                        "heads_label": cfg["heads_label"], "sentence": claim_sentence(group, cfg, alpha, families)})
    return out
