"""`vrh-lmms report DIR... --output reports/NAME`: statistics, tables and plots from sweep or lmms-eval folders."""

from __future__ import annotations

import argparse
from pathlib import Path

from vrh_lmms.base import console
from vrh_lmms.report import ReportSettings, build_report
from vrh_lmms.report.html import write_report_html
from vrh_lmms.report.interventions import append_to_report, check_sources


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dirs", nargs="+", metavar="DIR",
                        help="sweep folders and/or lmms-eval --output_path folders (searched recursively)")
    parser.add_argument("--output", "-o", required=True, help="report folder to write (report.md, report.json, plots/)")
    parser.add_argument("--heads-files", nargs="+", default=[], metavar="FILE",
                        help="heads files for layer x head heatmaps and the top-k Jaccard overlap matrix")
    parser.add_argument("--overlap-k", type=int, nargs="+", default=[], metavar="K",
                        help="k values for the overlap matrix (default: the top-k values in the report, else 20)")
    parser.add_argument("--score-field", default=None, metavar="NAME",
                        help="numeric per-sample field to score instead of vrh_record.correct "
                             "(plain lmms-eval tasks; dotted for nesting, e.g. vrh_record.iou; default: none, "
                             "vrh_record.correct)")
    parser.add_argument("--score-quantity", default=None, choices=("binary", "bounded", "unbounded"),
                        help="what the score is, which chooses its interval: binary (0/1 outcomes, Wilson), bounded "
                             "(in [0, 1], t clipped to [0, 1]) or unbounded (t). Default: binary for "
                             "vrh_record.correct, unbounded for --score-field")
    parser.add_argument("--n-resamples", type=int, default=10_000,
                        help="bootstrap resamples and Monte Carlo sign flips for numeric scores (default 10000)")
    parser.add_argument("--alpha", type=float, default=0.05, help="1 - confidence level of CIs (default 0.05)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and sign flips (default 0)")
    parser.add_argument("--intersection", action="store_true",
                        help="when the runs of a model x task score different docs, restrict every run to the docs "
                             "all of them share (default: stop with an error naming the runs and counts)")
    parser.add_argument("--steer", default=None, metavar="DIR",
                        help="a `vrh-lmms steer` folder: adds the steering table (docs/interventions.md; default: "
                             "none)")
    parser.add_argument("--patch", default=None, metavar="DIR",
                        help="a `vrh-lmms patch` folder: adds the patching map and head-set recoveries (default: "
                             "none)")
    parser.add_argument("--allow-incomplete", action="store_true",
                        help="report sweep folders that did not finish (pending configurations) or mix another "
                             "sweep's results; the report then says so in its first line and in report.json "
                             "(default: refuse, naming them)")
    parser.add_argument("--no-plots", action="store_true", help="skip the matplotlib figures")
    parser.add_argument("--force", action="store_true",
                        help="replace a report written into --output before (anything else there is refused)")


def run(args: argparse.Namespace) -> int:
    settings = ReportSettings(
        alpha=args.alpha,
        n_resamples=args.n_resamples,
        seed=args.seed,
        score_field=args.score_field,
        score_quantity=args.score_quantity,
        heads_files=tuple(args.heads_files),
        overlap_k=tuple(args.overlap_k),
        plots=not args.no_plots,
        force=args.force,
        intersection=args.intersection,
        allow_incomplete=args.allow_incomplete,
        arguments={k: v for k, v in vars(args).items() if k != "command"},
    )
    if args.steer or args.patch:
        check_sources(args.steer, args.patch)  # before the statistics
    console.step(f"report on {len(args.dirs)} folder(s)", line=False)
    report = build_report(args.dirs, args.output, settings)
    if args.steer or args.patch:
        append_to_report(args.output, args.steer, args.patch)
        write_report_html(args.output)  # report.md changed
    for warning in report["warnings"]:
        console.note(f"vrh-lmms: warning: {warning}")
    n_configs = sum(len(g["configs"]) for g in report["groups"])
    out = Path(args.output)
    files = [(out / "report.html", "the report as one page (open in a browser)"),
             (out / "report.md", "the same in markdown"),
             (out / "report.json", "every number of the report"),
             (out / "explorer.html", "the heads, docs, boxes and drops to explore (open in a browser)")]
    if report["files"]["plots"]:
        files.append((out / "plots", f"{len(report['files']['plots'])} plots"))
    if args.steer or args.patch:
        files.append((out / "interventions.md", "steering / patching sections"))
    console.print_summary(console.files_table(
        f"Report: {len(report['groups'])} model x task groups, {n_configs} configurations, "
        f"{len(report['claims'])} claims", files))
    return 0
