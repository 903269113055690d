"""The run of `vrh-lmms attention-maps` (its options: vrh_lmms.cli.commands.attention_maps): every head's
attention over the image for chosen docs, grids of all heads, the top-k VRHs and the rest, with boxes."""

from __future__ import annotations

import argparse
from pathlib import Path

from vrh_lmms.base import console
from vrh_lmms.base.errors import VRHError
from vrh_lmms.runs.maps.collect import collect_maps, parse_docs
from vrh_lmms.runs.maps.locator import LocatorSettings, parse_threshold
from vrh_lmms.runs.maps.outputs import LAYOUT, RESULT, png_name, write_maps
from vrh_lmms.runs.maps.setup import prepare, run_identity
from vrh_lmms.runs.runner import result_job


def run_attention_maps(args: argparse.Namespace) -> int:
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
