"""`vrh-lmms compare-heads A.json B.json [C.json ...]`: do two models (or two scorings) find the same heads? Top-k
overlap against chance (hypergeometric p), Jaccard and Spearman over all heads, per pair; a table and score maps."""

from __future__ import annotations

import argparse
from pathlib import Path

from vrh_lmms.base import atomic, owned
from vrh_lmms.report.compare_plots import score_maps_plot
from vrh_lmms.report.head_compare import SCHEMA, compare, compare_markdown, load_inputs, verdict

JSON, MARKDOWN, PLOT = "compare.json", "compare.md", "compare.png"
_OURS = owned.json_with("pairs", schema_prefix=SCHEMA.split("/")[0] + "/")
LAYOUT: dict[str, owned.Check | None] = {
    JSON: _OURS,
    MARKDOWN: lambda p: p.is_file() and _OURS(p.with_name(JSON)),
    PLOT: lambda p: p.is_file() and _OURS(p.with_name(JSON)),
    f".{JSON}.*": owned.is_file, f".{MARKDOWN}.*": owned.is_file,
}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("heads_files", nargs="+", metavar="HEADS",
                        help="two or more heads files (vrh-heads/1), or paper:<model>[:<benchmark>] for a published "
                             "top-20 list, e.g. paper:Qwen2.5-VL-7B:refcoco")
    parser.add_argument("--k", type=int, default=20, help="top-k heads to compare (default 20, the paper's)")
    parser.add_argument("--cell", action="append", default=None,
                        help="scoring cell to compare, from each file's cells block (default: each file's primary); "
                             "once for every input, or once per input in order (e.g. the same file twice with "
                             "--cell out,sum,mean --cell in,sum,mean)")
    parser.add_argument("--allow-cross-geometry", action="store_true",
                        help="compare files of different layers x heads by head name only (no chance level, p value "
                             "or Spearman)")
    parser.add_argument("--output", required=True, help=f"folder for {JSON}, {MARKDOWN} and {PLOT}")
    parser.add_argument("--force", action="store_true", help="replace a comparison written here before")


def run(args: argparse.Namespace) -> int:
    items = load_inputs(list(args.heads_files), args.cell)
    block = compare(items, args.k, allow_cross_geometry=args.allow_cross_geometry)
    out = Path(args.output)
    owned.prepare_output(out, LAYOUT, force=args.force, what="an earlier comparison")
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_json(out / JSON, block)
    score_maps_plot(items, block, out / PLOT)
    atomic.write_text(out / MARKDOWN, compare_markdown(block, PLOT))
    for pair in block["pairs"]:
        print(verdict(pair))
    print(f"wrote {out / MARKDOWN}, {out / JSON}, {out / PLOT}")
    return 0
