"""`vrh-lmms discover`: score every head of a model's language decoder on a grounding task."""

from __future__ import annotations

import argparse

from vrh_lmms.base import console
from vrh_lmms.base.heads.heads_file import load_heads_file
from vrh_lmms.cli.commands.options import add_model_options
from vrh_lmms.runs.discovery.scoring import DEFAULT_CELL, PRESETS, all_cells, parse_cells
from vrh_lmms.runs.protocol import DISCOVER_PRESETS, resolve


def configure(parser: argparse.ArgumentParser) -> None:
    add_model_options(parser, model_args_note="")
    parser.add_argument("--tasks", required=True,
                        help="grounding task(s), e.g. vrh_refcoco_val, or tasks whose docs carry text-span evidence "
                        "(vrh_synth_text_needle; docs/evidence.md)")
    parser.add_argument("--limit", type=float, default=None, help="docs per task (default 200; -1 for all)")
    parser.add_argument("--preset", default=None, choices=sorted(DISCOVER_PRESETS),
                        help="the paper's protocol (docs/paper.md): paper = 200 docs, key tokens 'any', "
                             "out,sum,mean. Explicit flags win (default: none, each flag's own default)")
    parser.add_argument("--scoring", default=None,
                        help=f"primary cell Q,Phi,Omega (default {DEFAULT_CELL}); Q in "
                             "in|out|out_coords|out_random1|in+out, Phi in argmax|sum, Omega in mean|freq; or "
                             f"'retrieval', 'localization_heads', or a preset: {', '.join(PRESETS)}")
    parser.add_argument("--cells", default="all",
                        help="cells stored in the heads file besides the primary one: 'all' (default) or a "
                             "'+'-separated list of cells and presets")
    parser.add_argument("--key-tokens", default=None, choices=("overlap", "any", "center"),
                        help="which image tokens of the ground-truth box are the key tokens: 'overlap' (default) = "
                             "at least HALF of the token's cell inside the box (centre cell if none), not the "
                             "paper's rule despite the name; 'any' = every token whose cell overlaps the box "
                             "(the paper's rule); 'center' = cell centre inside the box"),
    parser.add_argument("--freq-top-k", type=int, default=None,
                        help="k of the per-sample top-k for Omega=freq (default: 10%% of heads, at most 20)")
    parser.add_argument("--null-query", action="store_true",
                        help="subtract each head's score on a content-free query (the expression replaced by N/A)")
    parser.add_argument("--no-means", action="store_true", help="skip per-head means (needed for ablation=mean)")
    parser.add_argument("--gen-kwargs", default=None,
                        help="lmms-eval generation kwargs, e.g. max_new_tokens=16 (default: the task's own)")
    parser.add_argument("--seed", type=int, default=0, help="evaluator seed (lmms-eval's --seed)")
    parser.add_argument("--output", required=True, help="heads file to write (e.g. heads.json)")
    parser.add_argument("--force", action="store_true",
                        help="replace a heads file (and its sidecars, or finished parts of another discovery) written "
                             "here before")


def run(args: argparse.Namespace) -> int:
    # deferred: keeps `vrh-lmms discover --help` free of torch, transformers, lmms_eval
    from vrh_lmms.runs.discovery.run import DiscoverySpec, run_discovery, sidecars

    opts = resolve(DISCOVER_PRESETS, args.preset,
                   {"limit": args.limit, "key_tokens": args.key_tokens, "scoring": args.scoring})
    limit = None if opts["limit"] < 0 else (int(opts["limit"]) if float(opts["limit"]).is_integer() else opts["limit"])
    scoring = opts["scoring"].strip()
    primary = scoring if scoring in PRESETS else parse_cells(scoring)[0]
    cells = all_cells() if args.cells == "all" else parse_cells(args.cells)
    spec = DiscoverySpec(model=args.model, model_args=args.model_args,
                         tasks=[t for t in args.tasks.split(",") if t], output=args.output, limit=limit,
                         cells=cells, primary=primary, freq_top_k=args.freq_top_k, collect_means=not args.no_means,
                         gen_kwargs=args.gen_kwargs, seed=args.seed, null_query=args.null_query,
                         key_tokens=opts["key_tokens"])
    console.step(f"discovery: {args.model} on {', '.join(spec.tasks)}", line=False)
    path = run_discovery(spec, force=args.force)
    if path is not None:
        side = sidecars(path)
        note = dead_heads_note(path)
        if note:
            console.note(f"vrh-lmms: note: {note}")
        console.print_summary(console.files_table("Discovery done", [
            (path, "heads file: every head's score (vrh-lmms heads shows it)"),
            (side["eval"], "lmms-eval's results and samples"), *console.log_row()]))
    return 0


def dead_heads_note(path) -> str | None:
    """One line when the model has heads that write nothing: how many, and the best rank one of them reached."""
    block = load_heads_file(path).extra.get("dead_heads") or {}
    heads = block.get("heads") or []
    if not heads:
        return None
    best = block.get("best_rank")
    where = f"; the best-ranked is #{best}, so a top-k with k >= {best} ablates a head that writes nothing" \
        if best else ""
    return (f"{len(heads)} heads write nothing (o_proj columns all zero); controls draw from the other heads"
            f"{where}")
