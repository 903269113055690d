"""`vrh-lmms models`: every image-text-to-text model type of the installed transformers, what works on it and
what is refused and why (vrh_lmms.model.coverage; docs/models.md holds its `--markdown` output)."""

from __future__ import annotations

import argparse

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.tables import did_you_mean


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model_types", nargs="*", metavar="MODEL_TYPE",
                        help="only these model types (config.json's model_type; default: all of them)")
    parser.add_argument("--summary", action="store_true",
                        help="print README's generated summary (the verdict and the types that ablate)")
    parser.add_argument("--markdown", action="store_true",
                        help="print the generated part of docs/models.md (verdict, full table, refusals by reason) "
                             "instead of the console table")


def run(args: argparse.Namespace) -> int:
    # deferred: keeps `vrh-lmms --help` free of torch, transformers (the table builds every class on the meta device)
    import transformers
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from vrh_lmms.model.coverage import coverage, image_text_types, markdown, row_for, summary

    known = image_text_types()
    for name in args.model_types:
        if name not in known:
            raise VRHError(f"model type {name!r} is not an image-text-to-text type of transformers "
                           f"{transformers.__version__}{did_you_mean(name, list(known))}")
    rows = [row_for(t, known[t]) for t in args.model_types] if args.model_types else coverage()
    if args.summary:
        print(summary(rows, transformers.__version__), end="")
        return 0
    if args.markdown:
        print(markdown(rows, transformers.__version__), end="")
        return 0
    ok = sum(r.ablates for r in rows)
    table = Table(title=f"{ok} of {len(rows)} image-text-to-text model types: heads can be ablated "
                        f"(transformers {transformers.__version__}; --model vrh_hf or vrh.load)")
    for column in ("model type", "ablation", "packing", "capture / steering", "KV policy", "discovery"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(*(escape(c) for c in (r.model_type, r.ablation, r.packing, r.capture, r.kv, r.discovery)))
    Console().print(table)
    return 0
