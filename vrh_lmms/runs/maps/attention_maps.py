"""`vrh-lmms attention-maps`: every head's attention over the image for chosen docs (the paper's Figs A1/A2):
the mean of all heads, of the top-k VRHs, and of all heads but the VRHs, with the GT, predicted and located boxes."""

from __future__ import annotations

import argparse
from pathlib import Path

from vrh_lmms.base import console
from vrh_lmms.base.errors import VRHError
from vrh_lmms.cli.commands.options import add_model_options
from vrh_lmms.runs.maps.capture import ROWS
from vrh_lmms.runs.maps.collect import collect_maps, parse_docs
from vrh_lmms.runs.maps.locator import LocatorSettings, parse_threshold
from vrh_lmms.runs.maps.outputs import LAYOUT, RESULT, png_name, write_maps
from vrh_lmms.runs.maps.setup import prepare, run_identity
from vrh_lmms.runs.runner import result_job


def add_map_options(parser: argparse.ArgumentParser) -> None:
    """Options both map commands share (attention-maps, locate)."""
    add_model_options(parser)
    parser.add_argument("--tasks", required=True, help="grounding task(s) with vrh_record, e.g. vrh_refcoco_val")
    parser.add_argument("--heads-file", required=True, help="heads file whose ranking gives the top-k VRHs")
    parser.add_argument("--rows", default="answer", choices=ROWS,
                        help="query rows: answer (the model's answer tokens, default), prompt (the referring "
                             "expression's tokens), last (the last prompt token)")
    parser.add_argument("--sigma", type=float, default=1.0,
                        help="locator: Gaussian smoothing in cells (default 1.0; 0 = none)")
    parser.add_argument("--threshold", default="mean",
                        help="locator: keep cells >= the smoothed map's mean (default 'mean'), or >= this fraction "
                             "of its maximum (e.g. 0.5)")
    parser.add_argument("--gen-kwargs", default=None, help="lmms-eval generation kwargs override")
    parser.add_argument("--allow-cross-model", action="store_true", help="use a heads file of another geometry")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", required=True, help="output folder")
    parser.add_argument("--force", action="store_true",
                        help="replace another run's result in the output folder, or run this one again")


def configure(parser: argparse.ArgumentParser) -> None:
    add_map_options(parser)
    parser.add_argument("--docs", default="0", help="doc ids, comma-separated (default 0), e.g. 0,3,7")
    parser.add_argument("--k", type=int, default=20, help="top-k VRHs of the heads file (default 20)")


def run(args: argparse.Namespace) -> int:
    """A job of the runner with one unit (vrh_lmms.runs.runner.result_job): the same arguments into a finished
    folder do nothing and load no model. The maps depend on the model, the heads file (its sha256 is in the
    identity), the data and these settings, as a sweep's results do, so a rerun that changed none of them has
    nothing new to show; --force draws them again."""
    docs = parse_docs(args.docs)
    settings = LocatorSettings(sigma=args.sigma, threshold=parse_threshold(args.threshold))
    out = Path(args.output)
    if args.k < 1:
        raise VRHError(f"--k must be at least 1, got {args.k}")

    def job(tasks: list[str], heads_file):
        if args.k > len(heads_file.ranking):
            raise VRHError(f"--k {args.k} is more than the heads file ranks ({len(heads_file.ranking)})")
        identity = run_identity("attention-maps", {**vars(args), "docs": docs}, IDENTITY, args.heads_file, tasks)
        return result_job(out, LAYOUT, RESULT, identity, "attention-maps run")

    console.step(f"attention maps: {args.model} on {args.tasks}, docs {args.docs}", line=False)
    run_ = prepare(args.model, args.model_args, args.tasks, args.heads_file, args.allow_cross_model,
                   doc_ids=docs, job=job, force=args.force)
    if run_.finished:
        console.step(run_.runner.complete_note())
        return 0
    ranking = run_.heads_file.ranking
    paths: list[Path] = []

    def unit(_: str) -> None:
        maps = collect_maps(run_.lm, run_.tasks, run_.tm, docs, None, args.rows, gen_kwargs=args.gen_kwargs,
                            keep_images=True, seed=args.seed)
        header = {"model": args.model, "model_args": args.model_args, "tasks": run_.tasks,
                  "heads_file": str(Path(args.heads_file).resolve()), "rows": args.rows}
        paths.append(write_maps(maps, ranking[:args.k], settings, out, header))
        paths.extend(out / png_name(m) for m in maps)

    run_.runner.run(unit)
    console.print_summary(console.files_table("Attention maps done", [
        (paths[0], "every doc's grids (all heads, top-k, the rest), boxes and locator settings"),
        *[(p, f"{p.stem}: three maps over the image") for p in paths[1:]]]))
    return 0


# what the maps depend on, besides the heads file and the data (vrh_lmms.runs.maps.setup.run_identity)
IDENTITY = ("model", "model_args", "tasks", "docs", "k", "rows", "sigma", "threshold", "gen_kwargs",
            "allow_cross_model", "seed")
