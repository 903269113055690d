"""Comparisons across configurations: top-k vs random-k empirical nulls, the summary rows, cross-model transfer rows,
and Holm / Benjamini-Hochberg corrections within three families of tests:

- `claims`: each top-k (own or transferred heads) and explicit head set against its baseline (primary test);
- `claims_vs_controls`: each top-k drop against the drops of its random / layer-matched / image-matched draws
  (empirical p);
- `controls`: each random, layer-matched and image-matched draw against its baseline.

Correcting the claims together with the controls would let the number of control draws dilute the claims; the
empirical nulls get a family of their own because their p-values have a floor of 1/(R+1).
"""

from __future__ import annotations

import numpy as np
from scipy.stats import sem

from vrh_lmms.base.heads import kinds
from vrh_lmms.base.stats import adjust_pvalues, topk_vs_random
from vrh_lmms.report.analysis import CONTROL_KINDS

NULL_KINDS = CONTROL_KINDS
CLAIM_KINDS = kinds.CLAIMS
TEST_FAMILIES = {
    "claims": "each top-k (own or transferred heads) and explicit head set vs its baseline: cluster sign-flip test",
    "claims_vs_controls": "each top-k drop vs the drops of its random / layer-matched / image-matched draws: empirical "
                          "p, floor 1/(R+1)",
    "controls": "each random, layer-matched and image-matched draw vs its baseline: cluster sign-flip test",
}


def _null_pool(group: dict, top: dict, null_kind: str) -> tuple[list[dict], str]:
    """Null configurations for one top-k config: same kind, k, mode and heads source; a transferred top-k falls back
    to the model's own random sets (random heads do not depend on the heads file)."""
    pool = [
        c for c in group["configs"]
        if c["kind"] == null_kind and c["k"] == top["k"] and c["mode"] == top["mode"] and c["drop"] is not None
    ]
    same = [c for c in pool if c["heads_source"] == top["heads_source"]]
    if same:
        return same, "same"
    own = [c for c in pool if c["heads_source"] is None]
    return own, "own"


def add_null_comparisons(group: dict) -> None:
    """One comparison per (top-k config, null kind) that has at least one null configuration with a drop."""
    for top in group["configs"]:
        if top["kind"] != "topk" or top["drop"] is None:
            continue
        for null_kind in NULL_KINDS:
            pool, source = _null_pool(group, top, null_kind)
            if not pool:
                continue
            result = topk_vs_random(top["drop"]["drop"], [c["drop"]["drop"] for c in pool])
            group["null_comparisons"].append(
                {
                    "config": top["label"],
                    "k": top["k"],
                    "mode": top["mode"],
                    "null_kind": null_kind,
                    "null_source": source,
                    "null_configs": [c["label"] for c in pool],
                    "null_drops": [c["drop"]["drop"] for c in pool],
                    **result.to_dict(),
                    "family": None,
                    "p_holm": None,
                    "p_bh": None,
                }
            )


def _drop_spread(configs: list[dict]) -> dict | None:
    """Drops of a set of control draws: R, mean, sd (ddof=1), the mean's standard error, min, max. Accuracies are
    left out on purpose: a summary row shows drops only, so no accuracy stands beside a drop column."""
    drops = [c["drop"]["drop"] for c in configs if c["drop"] is not None]
    if not configs:
        return None
    return {
        "labels": [c["label"] for c in configs],
        "n": len(configs),
        "drop_mean": float(np.mean(drops)) if drops else None,
        "drop_sd": float(np.std(drops, ddof=1)) if len(drops) > 1 else None,
        "drop_se": float(sem(drops)) if len(drops) > 1 else None,
        "drop_min": float(np.min(drops)) if drops else None,
        "drop_max": float(np.max(drops)) if drops else None,
    }


def _find_comparison(group: dict, label: str, null_kind: str) -> dict | None:
    return next((n for n in group["null_comparisons"] if n["config"] == label and n["null_kind"] == null_kind), None)


def add_summary(group: dict) -> None:
    """Summary rows: baseline, top-k and random / layer-matched / image-matched draws (drops over draws) for each
    own top-k."""
    base = group["baseline"]
    for top in group["configs"]:
        if top["kind"] != "topk" or top["heads_source"] is not None:
            continue
        drop, test = top["drop"], top["test"]
        row = {
            "config": top["label"],
            "heads_label": top["heads_label"],
            "k": top["k"],
            "mode": top["mode"],
            "baseline_acc": None if base is None else base["accuracy"]["mean"],
            "topk_acc": top["accuracy"]["mean"],
            "topk_drop": None if drop is None else drop["drop"],
            "topk_drop_ci": None if drop is None else [drop["ci_low"], drop["ci_high"]],
            "p_test": None if test is None else test["pvalue"],
        }
        for null_kind in NULL_KINDS:
            pool = [
                c for c in group["configs"]
                if c["kind"] == null_kind and c["k"] == top["k"] and c["mode"] == top["mode"]
                and c["heads_source"] is None
            ]
            row[null_kind] = _drop_spread(pool)
            match = _find_comparison(group, top["label"], null_kind)
            row[f"p_{null_kind}"] = None if match is None else match["pvalue"]
            row[f"p_{null_kind}_floor"] = None if match is None else match["p_floor"]
        group["summary"].append(row)


def _brief(config: dict) -> dict:
    return {
        "label": config["label"],
        "acc": config["accuracy"]["mean"],
        "drop": None if config["drop"] is None else config["drop"]["drop"],
        "drop_ci": None if config["drop"] is None else [config["drop"]["ci_low"], config["drop"]["ci_high"]],
        "p_test": None if config["test"] is None else config["test"]["pvalue"],
    }


def transfer_rows(groups: list[dict]) -> list[dict]:
    """Configs whose heads file came from another model, beside the same config with the model's own heads."""
    rows = []
    for group in groups:
        for cfg in group["configs"]:
            if cfg["heads_source"] is None:
                continue
            own = next(
                (c for c in group["configs"] if c["config_id"] == cfg["config_id"] and c["heads_source"] is None), None
            )
            rows.append(
                {
                    "model": group["model"],
                    "task": group["task"],
                    "config_id": cfg["config_id"],
                    "kind": cfg["kind"],
                    "k": cfg["k"],
                    "mode": cfg["mode"],
                    "heads_from": cfg["heads_source"],
                    "baseline_acc": None if group["baseline"] is None else group["baseline"]["accuracy"]["mean"],
                    "own": None if own is None else _brief(own),
                    "transferred": _brief(cfg),
                }
            )
    return rows


def family_of(config: dict) -> str:
    return "controls" if config["kind"] in CONTROL_KINDS else "claims"


def apply_corrections(groups: list[dict]) -> dict:
    """Holm and BH within each family; the adjusted values are written back next to each raw p-value."""
    slots: dict[str, list[tuple[dict, dict]]] = {name: [] for name in TEST_FAMILIES}
    for group in groups:
        where = {"model": group["model"], "task": group["task"]}
        for cfg in group["configs"]:
            if cfg["test"] is not None:
                slots[family_of(cfg)].append((cfg["test"], {**where, "config": cfg["label"], "test": "sign-flip"}))
        for comp in group["null_comparisons"]:
            slots["claims_vs_controls"].append(
                (comp, {**where, "config": comp["config"], "test": f"vs {comp['null_kind']} (R={comp['n_null']})"}))
    families = {}
    for name, members in slots.items():
        raw = [target["pvalue"] for target, _ in members]
        holm, bh = adjust_pvalues(raw, "holm"), adjust_pvalues(raw, "bh")
        tests = []
        for (target, info), p, ph, pb in zip(members, raw, holm, bh, strict=True):
            target["family"], target["p_holm"], target["p_bh"] = name, ph, pb
            tests.append({**info, "p": p, "p_holm": ph, "p_bh": pb})
        families[name] = {"description": TEST_FAMILIES[name], "n_tests": len(tests), "tests": tests}
    return {"methods": {"holm": "family-wise error", "bh": "false discovery rate"}, "families": families}
