"""The run of `vrh-lmms rank` (its options: vrh_lmms.cli.commands.rank): retrieval heads as a ranker, candidate
images ranked by the heads' attention mass, Recall@1/@5 and MRR of the top-k heads vs all live heads vs random-k."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from vrh_lmms.base import console
from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.synth.demo_spec import EVAL_SCENE_SEED, PROMPT, SPEC_FILE, DemoSpec
from vrh_lmms.harness.preload import parse_model_args
from vrh_lmms.runs.checks import dead_heads_of
from vrh_lmms.runs.maps.setup import load_checked, run_identity
from vrh_lmms.runs.preflight import Checks, Ready, preflight
from vrh_lmms.runs.rank import outputs
from vrh_lmms.runs.rank.data import ANNOTATIONS, PAGES, load_mmdocir, parse_data, synth_set
from vrh_lmms.runs.rank.outputs import table_rows
from vrh_lmms.runs.rank.scoring import NULL_QUERY
from vrh_lmms.runs.runner import result_job


def _ks(text: str) -> list[int]:
    try:
        ks = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise VRHError(f"--k {text!r}: give head-set sizes as comma-separated integers, e.g. 5,10") from None
    if not ks or ks[0] < 1:
        raise VRHError(f"--k {text!r}: sizes must be at least 1")
    return ks


def _demo_spec(model_args: str):
    """The demo spec beside `pretrained` (its scenes and prompt), or None for other models."""
    pre = parse_model_args(model_args).get("pretrained")
    return DemoSpec.load(pre) if pre and (Path(str(pre)) / SPEC_FILE).is_file() else None


def load_data(args: argparse.Namespace):
    """The queries, and the template that turns a query into the prompt's text ({query})."""
    kind, path = parse_data(args.data)
    if args.limit is not None and args.limit < 1:
        raise VRHError(f"--limit must be at least 1, got {args.limit}")
    if kind == "mmdocir":
        return load_mmdocir(path, args.limit, args.max_pages), "{query}"
    spec = _demo_spec(args.model_args)
    cfg = spec.scene_config() if spec else None
    seed = EVAL_SCENE_SEED if args.scene_seed is None else args.scene_seed
    data = synth_set(args.limit, args.candidates, seed, args.scene_start, cfg)
    return data, PROMPT.replace("{expression}", "{query}")


def run_rank(args: argparse.Namespace) -> int:
    """A job of the runner with one unit (vrh_lmms.runs.runner.result_job): the same arguments into a finished
    folder do nothing and load no model. The ranks depend on the model (the demo spec beside it chooses the
    synthetic scenes), the heads file (its sha256 is in the identity), these settings (the scenes and draws are
    seeded) and, for --data mmdocir, the two files of the folder: their sizes and modification times are in the
    identity too, so a changed data set is another run, refused without --force; --force ranks again."""
    # deferred: keeps `vrh-lmms rank --help` free of torch, transformers, scipy
    from vrh_lmms.harness import lmms
    from vrh_lmms.runs.discovery.collector import backend_processor
    from vrh_lmms.runs.rank.capture import QUERY_ROW, candidate_mass, checked_spans, multi_image_inputs
    from vrh_lmms.runs.rank.evaluate import evaluate, query_ranks, rank_sets

    kind, folder = parse_data(args.data)  # a bad --data is refused before anything loads
    ks = _ks(args.k)
    out = Path(args.output)

    def settings() -> None:
        if args.random_seeds < 0:
            raise VRHError(f"--random-seeds must be >= 0, got {args.random_seeds}")

    def job(ready: Ready):
        if ks[-1] > len(ready.heads_file.ranking):
            raise VRHError(f"--k {ks[-1]} is more than the heads file ranks ({len(ready.heads_file.ranking)})")
        identity = run_identity("rank", {**vars(args), "k": ks}, IDENTITY, args.heads_file) | _data_files(kind, folder)
        return result_job(out, outputs.LAYOUT, outputs.RESULT, identity, "rank run")

    def docs(_: Ready):  # the queries and candidate images, read before any weight loads
        console.step(f"ranker: {args.model} on {args.data}", line=False)
        return load_data(args)

    why = "the ranker reads the intact model; heads are chosen with --heads-file and --k"
    ready = preflight(Checks("the ranker", args.model, args.model_args, None, args.heads_file, head_args=why,
                             allow_cross_model=args.allow_cross_model, settings=settings, job=job, docs=docs,
                             stop_when_finished=True), args.force)
    if ready.finished:
        console.step(ready.runner.complete_note())
        return 0
    (data, template), hf = ready.docs, ready.heads_file
    lm = load_checked(ready, lambda: lmms.build_model(args.model, args.model_args, batch_size=1),
                      args.allow_cross_model)
    geometry = lm.vrh_decoder.geometry
    dead = dead_heads_of(lm, hf)
    sets = rank_sets(hf, geometry, ks, args.random_seeds, dead)
    done: dict[str, Any] = {}

    def unit(_: str) -> None:
        processor = backend_processor(lm)
        text_first = getattr(lm, "vrh_image_position", "before_prompt") == "after_prompt"

        def mass(text: str, set_id: str) -> np.ndarray:
            inputs = multi_image_inputs(processor, template.format(query=text), data.sets[set_id].images, text_first)
            return candidate_mass(lm.model, dict(inputs), checked_spans(processor, inputs))

        query_mass: dict[str, np.ndarray] = {}
        null_mass: dict[str, np.ndarray] = {}
        console.step("capturing attention over the candidates")
        bar = console.bar(len(data.queries) + len(data.sets), "forwards (queries + null queries)", "forward")
        try:
            for set_id in data.sets:
                null_mass[set_id] = mass(NULL_QUERY, set_id)
                bar.update(1)
            for q in data.queries:
                query_mass[q.query_id] = mass(q.text, q.set_id)
                bar.update(1)
        finally:
            bar.close()
        ranks = query_ranks(data.queries, query_mass, null_mass, sets)
        n_cands = sorted({len(s.images) for s in data.sets.values()})
        chance = float(np.mean([min(1.0, len(q.gold) / len(data.sets[q.set_id].images)) for q in data.queries]))
        result: dict[str, Any] = {
            "model": args.model, "model_args": args.model_args, "data": data.name, "data_arg": args.data,
            "notes": data.notes, "heads_file": str(Path(args.heads_file).resolve()), "ks": ks,
            "random_seeds": args.random_seeds, "query_row": QUERY_ROW, "null_query": NULL_QUERY,
            "prompt_template": template, "text_first": text_first, "dead_heads": [str(h) for h in dead],
            "n_queries": len(data.queries), "n_sets": len(data.sets),
            "candidates": n_cands[0] if len(n_cands) == 1 else f"{n_cands[0]}-{n_cands[-1]}",
            "chance_recall@1": chance, "results": evaluate(data.queries, ranks, sets, ks),
            "head_sets": {s.id: [str(h) for h in s.heads] for s in sets},
            "queries": [{"id": q.query_id, "set": q.set_id, "text": q.text, "gold": q.gold,
                         "ranks": {sc: {sid: int(r[i]) for sid, r in by.items()} for sc, by in ranks.items()}}
                        for i, q in enumerate(data.queries)]}
        done.update(result=result, files=outputs.write(result, out))

    ready.runner.run(unit)
    result, (js, md, png) = done["result"], done["files"]
    console.print_summary(summary_table(result), *console.files_table("Ranker done", [
        (js, "every figure and each query's gold rank per head set"), (md, "the tables with 95% intervals"),
        (png, "Recall@1 and MRR per head set"), *console.log_row()]))
    return 0


# what the ranks depend on, besides the heads file and the data files (vrh_lmms.runs.maps.setup.run_identity)
IDENTITY = ("model", "model_args", "data", "k", "random_seeds", "limit", "candidates", "scene_seed", "scene_start",
            "max_pages", "allow_cross_model")


def _data_files(kind: str, folder: str | None) -> dict[str, Any]:
    """--data mmdocir: each published file's size and modification time (reading them whole to hash would take
    longer than the check is worth); a missing file is refused later, by the loader."""
    if kind != "mmdocir":
        return {}
    files = {}
    for name in (ANNOTATIONS, PAGES):
        path = Path(folder) / name
        files[name] = [path.stat().st_size, path.stat().st_mtime_ns] if path.is_file() else None
    return {"data_files": files}


def summary_table(result: dict[str, Any]):
    """The console table: the calibrated figures of rank.md."""
    table = Table(title=f"Ranker, null-question calibrated: {result['n_queries']} queries, {result['n_sets']} "
                        f"candidate sets (%, 95% CI clustered by set; chance R@1 "
                        f"{100 * result['chance_recall@1']:.1f})")
    for col in ("head set", "Recall@1", "Recall@5", "MRR", "paired difference, Recall@1"):
        table.add_column(col)
    for row in table_rows(result["results"]["calibrated"]):
        table.add_row(*row)
    return table
