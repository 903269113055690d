"""`vrh-lmms replicate`: the paper's protocol on one model (discovery on a detection set, k-sweeps with controls
on the disjoint rest, VQA cross-task, transfer, sample efficiency) into one resumable folder and one report."""

from __future__ import annotations

import argparse

from vrh_lmms.base import console
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.heads.plan import parse_int_list
from vrh_lmms.pipelines.replicate.plan import (
    DEMO_N_EVAL,
    PAPER_KS,
    PAPER_N_DETECT,
    PAPER_VQA_K,
    ReplicateSpec,
    demo_spec,
)
from vrh_lmms.pipelines.replicate.run import run_replicate


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--demo", action="store_true",
                        help="the shipped demo model on its synthetic scenes (no other model option needed)")
    parser.add_argument("--model", default="vrh_qwen25", help="registered vrh_* model (default vrh_qwen25)")
    parser.add_argument("--model_args", "--model-args", dest="model_args", default=None,
                        help="lmms-eval model args, e.g. pretrained=Qwen/Qwen2.5-VL-7B-Instruct (default: none; "
                             "--demo needs none)")
    parser.add_argument("--detection-task", default="vrh_refcoco_val",
                        help="task whose first --n-detect docs find the heads (default vrh_refcoco_val)")
    parser.add_argument("--grounding-tasks", default=None,
                        help="comma-separated grounding tasks for the k-sweeps (default: the detection task)")
    parser.add_argument("--vqa-tasks", default="vrh_vqa_paper",
                        help="comma-separated VQA tasks or groups for the cross-task test ('' to skip)")
    parser.add_argument("--n-detect", type=int, default=PAPER_N_DETECT, help="detection docs (paper: 200)")
    parser.add_argument("--limit", type=int, default=None,
                        help="evaluation docs per task (paper's extra models: 500; default all; --demo: evaluation "
                             f"scenes, default {DEMO_N_EVAL})")
    parser.add_argument("--k", default=",".join(map(str, PAPER_KS)), help="k grid (paper: 1,3,5,10,20)")
    parser.add_argument("--vqa-k", type=int, default=PAPER_VQA_K, help="k of the cross-task test (paper: 20)")
    parser.add_argument("--random-seeds", type=int, default=10, help="draws per control and k (default 10)")
    parser.add_argument("--partner", default=None,
                        help="model args of a second model on the same backbone (transfer, Fig 7); with --demo a "
                             "checkpoint folder such as docs/experiments/checkpoints/p21_s1 (default: none, no "
                             "transfer stage)")
    parser.add_argument("--compare-cells", default="paper",
                        help="scoring cells whose top-k the grounding sweep also masks (Figs 2/3/8b, Table A8): "
                             "paper (default: all of fig2, fig3, fig8b, a8), one of those, a '+'-separated list of "
                             "cells, or none")
    parser.add_argument("--control-docs", type=int, default=None, metavar="N",
                        help="the sweeps' control draws on one seeded image subset of each task's docs (whole "
                             "images until N docs; sweep --control-docs); top-k and baseline on every doc. Default: "
                             "every doc. The printed plan shows the control generations with and without it")
    parser.add_argument("--batch-size", type=int, default=1, help="docs per generate call")
    parser.add_argument("--calibrate-docs", type=int, default=4,
                        help="docs timed before the run to estimate its time in the printed plan (default 4; 0: "
                             "print the generations only)")
    parser.add_argument("--output", required=True, help="replication folder (resumed if it holds the same run)")
    parser.add_argument("--force", action="store_true", help="replace a replication with other settings")


def spec_from_args(args: argparse.Namespace) -> ReplicateSpec:
    ks = parse_int_list(args.k, "--k")
    if args.demo:
        spec = demo_spec(partner=args.partner, random_seeds=args.random_seeds, n_detect=args.n_detect,
                         n_eval=args.limit or DEMO_N_EVAL)
        spec.ks = ks
        spec.vqa_k = args.vqa_k
        spec.compare_cells = _cells(args.compare_cells)
        spec.control_docs = args.control_docs
        return spec
    if not args.model_args:
        raise VRHError("replicate needs --model_args pretrained=... (or --demo for the shipped demo model)")
    grounding = [t for t in (args.grounding_tasks or args.detection_task).split(",") if t]
    return ReplicateSpec(model=args.model, model_args=args.model_args, detection_task=args.detection_task,
                         grounding_tasks=grounding, vqa_tasks=[t for t in args.vqa_tasks.split(",") if t],
                         ks=ks, vqa_k=args.vqa_k, random_seeds=args.random_seeds, n_detect=args.n_detect,
                         limit=args.limit, partner_model_args=args.partner, batch_size=args.batch_size,
                         compare_cells=_cells(args.compare_cells), control_docs=args.control_docs)


def _cells(text: str) -> str | None:
    return None if text.strip().lower() in ("none", "") else text.strip()


def run(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    if args.calibrate_docs < 0:
        raise VRHError(f"--calibrate-docs must be >= 0, got {args.calibrate_docs}")
    summary = run_replicate(spec, args.output, force=args.force, calibrate_docs=args.calibrate_docs)
    out = summary.parent
    console.print_summary(console.files_table("Replication done", [
        (summary, "what was found, and this run beside the paper"),
        (out / "report" / "report.html", "every configuration with intervals, tests and plots"),
        (out / "replicate.json", "stages, settings and timings (a rerun resumes from it)"), *console.log_row()]))
    return 0
