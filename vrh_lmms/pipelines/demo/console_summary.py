"""The end of `vrh-lmms demo` on the console: the finding, one row per k, the demo model's design targets and the files
written, in a screenful.

demo_summary.md and the report hold everything else; `--verbose` prints demo_summary.md here as well.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from vrh_lmms.base import console
from vrh_lmms.base.heads import kinds
from vrh_lmms.base.heads.geometry import Geometry
from vrh_lmms.pipelines.demo.kcurve import control_series
from vrh_lmms.pipelines.demo.recall import recall_line
from vrh_lmms.pipelines.demo.stages import MODEL_LINE, TARGETS_NOTE, demo_controls
from vrh_lmms.report.fmt import pct, pct_ci, pct_opt_ci


def _control(row: dict[str, Any], kind: str) -> str:
    se = row.get(f"{kind}_mean_drop_se")
    return pct(row.get(f"{kind}_mean_drop")) + ("" if se is None else f" ± {pct(se)}")


def targets_cell(checks: dict[str, bool] | None) -> str:
    """`met`, or how many criteria this k misses: the verdict printed above the table names them with what each
    saw at each k (a cell naming them wraps the table over many lines on an 80-column terminal)."""
    if checks is None:
        return "n/a (> 10%)"
    failed = sum(not ok for ok in checks.values())
    return "met" if not failed else f"{failed} missed"


def k_table(summary: dict[str, Any]):
    """Per k: top-k drop [CI] beside the controls' mean drops ± SE (points), and whether the design targets hold (a
    model trained for the demo's scenes; a model that was not has none)."""
    total = Geometry.from_dict(summary["geometry"]).total_heads  # a hybrid decoder: its attention layers' heads
    criteria = summary["criteria"]
    targets = summary.get("design_targets", True)
    table = Table(box=None, padding=(0, 1), header_style="bold")
    controls = [kinds.kind(name) for name in demo_controls(targets_only=True)]
    for name, justify in (("k", "left"), ("top-k drop [95% CI]", "right"),
                          *((f"{c.dashed} ± SE", "right") for c in controls),
                          *([("design targets", "left")] if targets else [])):
        table.add_column(name, justify=justify, no_wrap=True)
    for r in summary["acceptance"]["rows"]:
        lo, hi = r["topk_drop_ci"]
        table.add_row(f"{r['k']} ({r['k'] / total:.0%})", pct_ci(r["topk_drop"], lo, hi),
                      *(_control(r, c.name) for c in controls),
                      *([targets_cell(criteria.get(str(r["k"])))] if targets else []))
    return table


def transfer_table(rows: list[dict[str, Any]]):
    """--transfer: per direction and k, the top-k drop with the model's own heads and with the other's."""
    table = Table(box=None, padding=(0, 1), header_style="bold",
                  title="Transfer: top-k heads ablated in the other model (drops in points)", title_justify="left")
    for name in ("model", "heads from", "k", "own heads", "other's heads"):
        table.add_column(name, no_wrap=True)
    for r in sorted(rows, key=lambda r: (r["model"], r["k"])):
        table.add_row(Text(Path(r["model"]).name), Text(Path(r["heads_from"]).name), str(r["k"]),  # names: no markup
                      pct_opt_ci(r["own_drop"], r["own_drop_ci"]),
                      pct_opt_ci(r["transferred_drop"], r["transferred_drop_ci"]))
    return table


def files(out: Path, recall: bool = False, rows: list[dict[str, Any]] | None = None) -> list[tuple[Path, str]]:
    """The files the demo wrote, each with what it holds; `rows` (the acceptance rows) name the k-curve's series:
    only those it draws (a control live heads could not supply at any k has no line)."""
    series = ["top-k", *(label for _, label in control_series(rows or [], kinds.DEFAULT_POOL))]
    rows = [(out / "report" / "report.html", "the report as one page: finding, tables, plots (open in a browser)"),
            (out / "report" / "report.md", "the report in markdown (report.json: its numbers)"),
            (out / "report" / "explorer.html", "explore the heads' attention, each doc's boxes, the drops (browser)"),
            (out / "demo_summary.md", "the demo's finding, its table per k and the model's design targets"),
            (out / "kcurve.png", f"drops against k: {' vs '.join(series)}")]
    if recall:
        rows.append((out / "recall.png", "recall heads: each set's top-k masked on the needle and grounding tasks"))
    return rows + console.log_row()


def show(summary: dict[str, Any], markdown: str, out: Path) -> None:
    """Print the demo's closing summary (the whole demo_summary.md first with --verbose or outside a CLI run)."""
    acc = summary["acceptance"]
    finding = markdown.splitlines()[0]  # what was measured; the design targets are a note on the model below
    targets = next((line for line in markdown.splitlines() if line.startswith(TARGETS_NOTE)), None)
    parts: list[Any] = []
    if console.verbose():
        parts.append(Text(markdown.replace("\n![k-curve](kcurve.png)\n", "")))
    parts += [Text(""), Text(finding.replace("**", ""), style="bold"),
              *([Text(f"{MODEL_LINE} {summary['model']} through {summary['model_id']} (family {summary['family']})")]
                if summary.get("model_id") else []),  # a model other than the shipped one
              Text(f"Baseline Acc@0.5 {acc['baseline_acc']:.1%} on {acc['n_eval']} held-out scenes; drops in "
                   f"points, controls as mean ± SE over their draws."),
              k_table(summary)]
    if targets:
        parts.append(Text(targets))
    parts += [Text(line) for line in markdown.splitlines() if line.startswith(("Steering (", "Patching ("))]
    if summary.get("transfer"):
        parts += [Text(""), transfer_table(summary["transfer"])]
    if summary.get("recall"):
        parts += [Text(""), Text(recall_line(summary["recall"]))]
    parts += [Text(""), *console.files_table(f"Written in {out} ({summary['seconds']:.0f} s)",
                                             files(out, bool(summary.get("recall")), acc["rows"]))]
    console.print_summary(*parts)
