"""Comparisons across configurations: top-k vs random-k nulls, the paper-style summary rows, cross-model transfer
rows and the Holm / Benjamini-Hochberg corrections over every p-value in the report."""

from __future__ import annotations

import numpy as np

from vrh_lmms.stats import adjust_pvalues, topk_vs_random

NULL_KINDS = ("random", "layer_matched", "image_matched")


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
                    "p_holm": None,
                    "p_bh": None,
                }
            )


def _spread(configs: list[dict]) -> dict | None:
    if not configs:
        return None
    accs = np.array([c["accuracy"]["mean"] for c in configs])
    drops = [c["drop"]["drop"] for c in configs if c["drop"] is not None]
    return {
        "labels": [c["label"] for c in configs],
        "n": len(configs),
        "acc_mean": float(accs.mean()),
        "acc_sd": float(accs.std(ddof=1)) if len(configs) > 1 else None,
        "acc_min": float(accs.min()),
        "acc_max": float(accs.max()),
        "drop_mean": float(np.mean(drops)) if drops else None,
        "drop_sd": float(np.std(drops, ddof=1)) if len(drops) > 1 else None,
    }


def add_summary(group: dict) -> None:
    """Paper-style rows: baseline, top-k and random-k / layer-matched (mean and sd over seeds) for each own top-k."""
    base = group["baseline"]
    for top in group["configs"]:
        if top["kind"] != "topk" or top["heads_source"] is not None:
            continue
        row = {
            "config": top["label"],
            "k": top["k"],
            "mode": top["mode"],
            "baseline_acc": None if base is None else base["accuracy"]["mean"],
            "topk_acc": top["accuracy"]["mean"],
            "topk_drop": None if top["drop"] is None else top["drop"]["drop"],
            "topk_drop_ci": None if top["drop"] is None else [top["drop"]["ci_low"], top["drop"]["ci_high"]],
        }
        for null_kind in NULL_KINDS:
            pool = [
                c for c in group["configs"]
                if c["kind"] == null_kind and c["k"] == top["k"] and c["mode"] == top["mode"]
                and c["heads_source"] is None
            ]
            row[null_kind] = _spread(pool)
            match = next(
                (n for n in group["null_comparisons"] if n["config"] == top["label"] and n["null_kind"] == null_kind),
                None,
            )
            row[f"p_{null_kind}"] = None if match is None else match["pvalue"]
        group["summary"].append(row)


def _brief(config: dict) -> dict:
    return {
        "label": config["label"],
        "acc": config["accuracy"]["mean"],
        "drop": None if config["drop"] is None else config["drop"]["drop"],
        "drop_ci": None if config["drop"] is None else [config["drop"]["ci_low"], config["drop"]["ci_high"]],
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


def apply_corrections(groups: list[dict]) -> dict:
    """Holm and BH over every McNemar and null-comparison p-value in the report; write the adjusted values back."""
    slots: list[tuple[dict, str, dict]] = []
    for group in groups:
        for cfg in group["configs"]:
            if cfg["mcnemar"] is not None:
                slots.append((cfg["mcnemar"], "mcnemar", {"model": group["model"], "task": group["task"],
                                                           "config": cfg["label"]}))
        for comp in group["null_comparisons"]:
            slots.append((comp, f"null_{comp['null_kind']}", {"model": group["model"], "task": group["task"],
                                                               "config": comp["config"]}))
    raw = [slot[0]["pvalue"] for slot in slots]
    holm = adjust_pvalues(raw, "holm")
    bh = adjust_pvalues(raw, "bh")
    tests = []
    for (target, test, where), p, ph, pb in zip(slots, raw, holm, bh, strict=True):
        target["p_holm"], target["p_bh"] = ph, pb
        tests.append({**where, "test": test, "p": p, "p_holm": ph, "p_bh": pb})
    return {"n_tests": len(tests), "methods": {"holm": "family-wise error", "bh": "false discovery rate"},
            "tests": tests}
