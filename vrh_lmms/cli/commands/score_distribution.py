"""`vrh-lmms score-distribution HEADS [HEADS ...]`: how few heads carry the score (the paper's Fig 5): the share of
heads above each threshold, a table and the sorted scores on a log scale."""

from __future__ import annotations

import argparse
from pathlib import Path

from vrh_lmms.base import atomic, owned
from vrh_lmms.base.errors import VRHError
from vrh_lmms.report.compare_plots import distribution_plot
from vrh_lmms.report.head_compare import load_inputs
from vrh_lmms.report.score_distribution import PAPER_THRESHOLDS, SCHEMA, distribution, distribution_markdown

JSON, MARKDOWN, PLOT = "distribution.json", "distribution.md", "distribution.png"
_OURS = owned.json_with("inputs", "thresholds", schema_prefix=SCHEMA.split("/")[0] + "/")
LAYOUT: dict[str, owned.Check | None] = {
    JSON: _OURS,
    MARKDOWN: lambda p: p.is_file() and _OURS(p.with_name(JSON)),
    PLOT: lambda p: p.is_file() and _OURS(p.with_name(JSON)),
    f".{JSON}.*": owned.is_file, f".{MARKDOWN}.*": owned.is_file,
}


def parse_thresholds(text: str) -> list[float]:
    try:
        values = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise VRHError(f"--thresholds {text!r}: expected comma-separated numbers, e.g. 1e-3,5e-3") from None
    if not values:
        raise VRHError("--thresholds: give at least one threshold, e.g. 1e-3,5e-3")
    return values


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("heads_files", nargs="+", metavar="HEADS", help="one or more heads files (vrh-heads/1)")
    parser.add_argument("--thresholds", default=",".join(f"{t:g}" for t in PAPER_THRESHOLDS),
                        help="score thresholds (default 0.001,0.005: the paper's Fig 5)")
    parser.add_argument("--cell", action="append", default=None,
                        help="scoring cell, from each file's cells block (default: each file's primary); once for "
                             "every input, or once per input in order")
    parser.add_argument("--output", required=True, help=f"folder for {JSON}, {MARKDOWN} and {PLOT}")
    parser.add_argument("--force", action="store_true", help="replace a distribution written here before")


def run(args: argparse.Namespace) -> int:
    thresholds = parse_thresholds(args.thresholds)
    items = load_inputs(list(args.heads_files), args.cell)
    block = distribution(items, thresholds)
    out = Path(args.output)
    owned.prepare_output(out, LAYOUT, force=args.force, what="an earlier score distribution")
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_json(out / JSON, block)
    distribution_plot(items, thresholds, out / PLOT)
    text = distribution_markdown(block, PLOT)
    atomic.write_text(out / MARKDOWN, text)
    print("\n".join(line for line in text.splitlines() if line.startswith("- ")))
    print(f"wrote {out / MARKDOWN}, {out / JSON}, {out / PLOT}")
    return 0
