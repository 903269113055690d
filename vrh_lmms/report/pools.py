"""The report's account of control pools: which heads write nothing, what the control draws were drawn from, how many
dead heads each kind of draw held, and which configurations could not be drawn at all.

A head whose o_proj columns are all zero writes nothing, so ablating it costs nothing by construction; a control
draw made of such heads measures nothing (vrh_lmms.base.heads.spec, control pools). Sweeps draw controls from live heads
by default; with `--control-pool all` (the paper's uniform draws), or beside live draws as `random_all`, the report
says how many of each draw's heads were dead.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from vrh_lmms.base.escape import md
from vrh_lmms.base.heads import kinds
from vrh_lmms.base.paths import shown_model, shown_path
from vrh_lmms.report.analysis import CONTROL_KINDS, CONTROL_NAMES
from vrh_lmms.report.fmt import short


def unavailable_configurations(dirs: list[str | Path]) -> list[dict[str, str]]:
    """Configurations a sweep manifest (sweep.json) marked unavailable, with the folder and the reason."""
    out = []
    for d in dirs:
        manifest = Path(d) / "sweep.json"
        if not manifest.is_file():
            continue
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # an unreadable one is named by the completeness check
            continue
        for cfg in (data.get("configurations") if isinstance(data, dict) else None) or []:
            if isinstance(cfg, dict) and cfg.get("status") == "unavailable":
                out.append({"folder": shown_path(d), "id": str(cfg.get("id")), "reason": str(cfg.get("reason", ""))})
    return out


def control_dead_shares(group: dict[str, Any]) -> list[dict[str, Any]]:
    """Per control kind and k: draws, the pools they came from, draws holding a dead head, mean dead heads a draw."""
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for cfg in group["configs"]:
        if cfg["kind"] not in CONTROL_KINDS or cfg.get("heads_source") is not None:
            continue
        row = rows.setdefault((cfg["kind"], cfg["k"]), {"kind": cfg["kind"], "k": cfg["k"], "draws": 0,
                                                        "pools": set(), "with_dead": 0, "dead": 0, "known": True})
        row["draws"] += 1
        row["pools"].add(cfg.get("pool") or "all (before pools)")
        dead = cfg.get("dead_heads")
        if dead is None:
            row["known"] = False
            continue
        row["with_dead"] += bool(dead)
        row["dead"] += len(dead)
    out = []
    for (kind, k), row in sorted(rows.items(), key=lambda kv: (CONTROL_KINDS.index(kv[0][0]), kv[0][1])):
        out.append({"kind": kind, "k": k, "draws": row["draws"], "pools": sorted(row["pools"]),
                    "draws_with_dead": row["with_dead"] if row["known"] else None,
                    "mean_dead_per_draw": row["dead"] / row["draws"] if row["known"] and row["draws"] else None})
    return out


def pools_section(groups: list[dict[str, Any]], unavailable: list[dict[str, str]]) -> list[str]:
    """Markdown lines: one sentence per model on its dead heads, a table of dead shares in control draws, and the
    configurations that could not be drawn."""
    lines: list[str] = []
    seen: set[str] = set()
    for g in groups:
        if g["model"] in seen:
            continue
        seen.add(g["model"])
        dead = g.get("dead_heads")
        if dead is None:
            continue
        if not dead:
            lines.append(f"- {md(shown_model(g['model']))}: every head "
                         "writes to the residual stream (no o_proj columns all zero), "
                         "so live and uniform control pools give the same draws.")
            continue
        listed = ", ".join(md(h) for h in dead[:12]) + (", ..." if len(dead) > 12 else "")
        lines.append(f"- {md(shown_model(g['model']))}: **{len(dead)} heads write nothing** "
                     f"(o_proj columns all zero: {listed}); "
                     "ablating them costs nothing by construction, so a control draw holding them controls for less.")
    table = []
    for g in groups:
        for row in control_dead_shares(g):
            share = "n/a" if row["draws_with_dead"] is None else f"{row['draws_with_dead']} of {row['draws']}"
            mean = "n/a" if row["mean_dead_per_draw"] is None else f"{row['mean_dead_per_draw']:.1f} of {row['k']}"
            table.append(f"| {md(short(g['model']))} | {md(g['task'])} | {CONTROL_NAMES[row['kind']]} | {row['k']} | "
                         f"{', '.join(md(p) for p in row['pools'])} | {share} | {mean} |")
    if table and any(g.get("dead_heads") for g in groups):
        lines += ["", "| Model | Task | Control | k | Pool | Draws holding a dead head | Dead heads per draw (mean) |",
                  "|---|---|---|---|---|---|---|", *table]
    dead_tops = [f"{md(c['label'])} ({md(g['task'])}): {', '.join(md(h) for h in c['dead_heads'])}"
                 for g in groups for c in g["configs"]
                 if c["kind"] in kinds.CLAIMS and c.get("dead_heads")]
    if dead_tops:
        lines += ["", "Ranked head sets holding heads that write nothing (the ranking is discovery's; ablating these "
                      "heads costs nothing): " + "; ".join(dead_tops) + "."]
    if unavailable:
        lines += ["", "Configurations that could not be drawn (reported, not padded with dead heads):", ""]
        lines += [f"- {md(ids)} ({md(shown_path(folder))}): {md(reason)}"
                  for (folder, reason), ids in grouped_draws(unavailable).items()]
    return lines


def grouped_draws(unavailable: list[dict[str, str]]) -> dict[tuple[str, str], str]:
    """(folder, reason) -> the configurations that fail for it, draws of one configuration on one line:
    `layer_matched5_s0-s9 (10 draws)`."""
    draws: dict[tuple[str, str, str, str], list[str]] = {}  # (folder, reason, before seed, after seed) -> seeds
    for u in unavailable:
        m = re.fullmatch(r"(.+?_s)(\d+)(_.+)?", u["id"])
        before, seed, after = (m.group(1), m.group(2), m.group(3) or "") if m else (u["id"], "", "")
        draws.setdefault((u["folder"], u["reason"], before, after), []).append(seed)
    out: dict[tuple[str, str], list[str]] = {}
    for (folder, reason, before, after), seeds in draws.items():
        span = seeds[0] if len(seeds) == 1 else f"{seeds[0]}-s{seeds[-1]} ({len(seeds)} draws)"
        out.setdefault((folder, reason), []).append(f"{before}{span}{after}")
    return {key: ", ".join(texts) for key, texts in out.items()}
