"""Comparing head sets and score maps of several heads files (`vrh-lmms compare-heads`; the paper's Fig 7): for each
pair, the top-k overlap with its chance level and hypergeometric tail p, the Jaccard index, and Spearman's rank
correlation of the two layer x head score maps over all heads.

A head is named by (layer, head), so two files are compared head by head only when their decoders have the same
layers x heads; across geometries only the names can be matched (`allow_cross_geometry`), with no chance level and no
Spearman. Published lists (`paper:`) rank 20 heads and carry no scores: their Spearman is not available.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

from vrh_lmms.base.errors import VRHError
from vrh_lmms.base.escape import md, md_code
from vrh_lmms.base.heads.geometry import head_name
from vrh_lmms.base.heads.heads_file import HeadsFile
from vrh_lmms.base.heads.inputs import is_ranking_only, load_heads_input
from vrh_lmms.base.paths import shown_path
from vrh_lmms.base.stats.overlap import jaccard, score_spearman, topk_overlap
from vrh_lmms.report.fmt import pval, short

SCHEMA = "vrh-compare/1"
PUBLISHED_CELL = "out,sum,mean"  # the paper's cell for its published lists


@dataclass
class HeadScores:
    """One compared input: its label, what was given, its grid, its scores (None: a ranking only) and ranking."""

    label: str
    source: str
    layers: int
    heads: int
    scores: np.ndarray | None
    ranking: list[str]
    cell: str | None
    dead: frozenset[str] | None = None  # heads that write nothing, where the file records them
    extra_label: str = ""  # what tells two inputs of one label apart (set by load_inputs)
    head_layers: tuple[int, ...] | None = None  # a hybrid decoder's layers with heads (None: every layer)

    @property
    def grid(self) -> tuple[int, int]:
        return self.layers, self.heads

    @property
    def has_heads(self) -> np.ndarray:
        """(layers, heads) bool: the cells that are heads (a hybrid decoder's linear-attention layers are not)."""
        rows = np.ones(self.layers, dtype=bool) if self.head_layers is None else \
            np.isin(np.arange(self.layers), self.head_layers)
        return np.repeat(rows[:, None], self.heads, axis=1)


def _dead(hf: HeadsFile) -> frozenset[str] | None:
    block = hf.extra.get("dead_heads")
    names = block.get("heads") if isinstance(block, dict) else None
    return frozenset(names) if isinstance(names, list) else None


def from_heads_file(hf: HeadsFile, source: str, cell: str | None = None) -> HeadScores:
    """The scores and ranking of `cell` (default: the file's primary cell) of one heads file or published list."""
    g = hf.geometry
    if is_ranking_only(hf):
        if cell not in (None, PUBLISHED_CELL):
            raise VRHError(f"{source}: a published list holds only the paper's {PUBLISHED_CELL} ranking, not cell "
                           f"{cell!r}")
        label = f"{hf.model['id']} (paper, {hf.scoring.get('benchmark')})"
        return HeadScores(label, source, g.layers, g.heads, None, [str(h) for h in hf.ranking], PUBLISHED_CELL)
    if cell is None:
        scores, ranking, used = hf.scores, [str(h) for h in hf.ranking], hf.scoring.get("cell")
    else:
        try:
            ranking = [str(h) for h in hf.cell_ranking(cell)]
        except VRHError as exc:
            raise VRHError(f"{source}: {exc}") from None
        scores, used = np.asarray(hf.cells[cell].get("scores"), dtype=float), cell
        if scores.shape != (g.layers, g.heads):
            raise VRHError(f"{source}: cell {cell!r} has scores of shape {scores.shape}, geometry says "
                           f"{g.layers} x {g.heads}")
    return HeadScores(short(str(hf.model.get("id") or source)), source, g.layers, g.heads,
                      np.asarray(scores, dtype=float), ranking, used, _dead(hf), head_layers=g.head_layers)


def load_inputs(sources: list[str], cell: str | list[str] | None = None) -> list[HeadScores]:
    """Each source (a path or `paper:<model>[:<benchmark>]`) as HeadScores, scored by `cell`: one cell for every
    input, or one per input (two cells of one discovery: the same file twice). Equal labels get what tells them
    apart added: the cell where the cells differ, else the source."""
    cells = cell if isinstance(cell, list) else [cell] * len(sources)
    if len(cells) == 1:
        cells = cells * len(sources)
    if len(cells) != len(sources):
        raise VRHError(f"--cell given {len(cells)} times for {len(sources)} inputs: give it once (every input) or "
                       f"once per input, in order")
    items = [from_heads_file(load_heads_input(s), s, c) for s, c in zip(sources, cells, strict=True)]
    labels = [i.label for i in items]
    for item in items:
        twins = [i for i in items if i.label == item.label]
        if len(twins) > 1:
            by_cell = len({i.cell for i in twins}) == len(twins)
            item.extra_label = f"{item.cell}" if by_cell else item.source
    for item in items:
        if labels.count(item.label) > 1:
            item.label = f"{item.label} [{item.extra_label}]"
    return items


def check_k(items: list[HeadScores], k: int) -> None:
    if k < 1:
        raise VRHError(f"--k {k}: k must be at least 1")
    for item in items:
        if k > len(item.ranking):
            raise VRHError(f"--k {k}: {item.source} ranks only {len(item.ranking)} heads")
        total = int(item.has_heads.sum())
        if 2 * k > total:
            raise VRHError(f"--k {k}: {item.source} has {total} heads; k must be at most half of them for an overlap "
                           f"to mean anything")


def check_geometry(items: list[HeadScores], allow_cross_geometry: bool) -> bool:
    """True when every input has one layers x heads grid; otherwise a one-line error unless allowed."""
    grids = {i.grid for i in items}
    if len(grids) == 1:
        return True
    if not allow_cross_geometry:
        shapes = ", ".join(f"{i.source} {i.layers} x {i.heads}" for i in items)
        raise VRHError(f"the inputs differ in geometry (layers x heads: {shapes}), so (layer, head) names different "
                       f"heads; pass --allow-cross-geometry to match top-k heads by name only (no Spearman)")
    return False


def compare_pair(a: HeadScores, b: HeadScores, k: int) -> dict[str, Any]:
    """Overlap, chance, p, Jaccard and Spearman of two inputs' top-k and score maps."""
    top_a, top_b = a.ranking[:k], b.ranking[:k]
    shared = sorted(set(top_a) & set(top_b), key=top_a.index)
    out: dict[str, Any] = {"a": a.label, "b": b.label, "k": k, "overlap": len(shared), "shared": shared,
                           "jaccard": jaccard(top_a, top_b)}
    if a.grid != b.grid or a.head_layers != b.head_layers:
        out |= {"population": None, "chance": None, "p_value": None, "spearman": None, "spearman_live": None,
                "note": f"geometries differ ({a.layers} x {a.heads} vs {b.layers} x {b.heads}): heads matched by "
                        f"name only; no chance level, p value or Spearman"}
        return out
    heads = a.has_heads
    n = int(heads.sum())
    ov = topk_overlap(top_a, top_b, n)
    out |= {"population": n, "chance": ov.chance, "p_value": ov.p_value}
    if a.scores is None or b.scores is None:
        which = [i.label for i in (a, b) if i.scores is None]
        what = "is a published ranking" if len(which) == 1 else "are published rankings"
        return out | {"spearman": None, "spearman_live": None,
                      "note": f"Spearman not available: {' and '.join(which)} {what} with no scores"}
    out["spearman"] = _finite(score_spearman(a.scores, b.scores, mask=None if a.head_layers is None else heads))
    out["spearman_live"] = None
    dead = (a.dead or frozenset()) | (b.dead or frozenset())
    if dead and (a.dead is not None or b.dead is not None):
        live = heads & np.array([[head_name(layer, head) not in dead for head in range(a.heads)]
                                 for layer in range(a.layers)])
        out["spearman_live"] = _finite(score_spearman(a.scores, b.scores, mask=live))
        out["n_live"] = int(live.sum())
        out |= live_overlap(a.ranking, b.ranking, dead, int(live.sum()), k)
    return out


def live_overlap(rank_a: list[str], rank_b: list[str], dead: frozenset[str], n_live: int, k: int) -> dict[str, Any]:
    """The top-k overlap among heads that write something: each ranking with the dead heads (of either model) left
    out, chance and hypergeometric p over the live pool. A model whose ranking puts its live heads first draws its
    top-k from that pool only, so chance over all heads understates what chance would share."""
    live_a = [h for h in rank_a if h not in dead][:k]
    live_b = [h for h in rank_b if h not in dead][:k]
    if min(len(live_a), len(live_b)) < k or 2 * k > n_live:
        return {"overlap_live": None, "chance_live": None, "p_value_live": None, "shared_live": None}
    ov = topk_overlap(live_a, live_b, n_live)
    return {"overlap_live": ov.overlap, "chance_live": ov.chance, "p_value_live": ov.p_value,
            "shared_live": sorted(set(live_a) & set(live_b), key=live_a.index)}


def _finite(x: float) -> float | None:
    return None if np.isnan(x) else x


def compare(items: list[HeadScores], k: int, allow_cross_geometry: bool = False) -> dict[str, Any]:
    """compare.json's content: the inputs, every pair, and the matrix of top-k overlap counts."""
    if len(items) < 2:
        raise VRHError("compare-heads needs at least two heads files (or paper: lists)")
    check_k(items, k)
    same = check_geometry(items, allow_cross_geometry)
    pairs = [compare_pair(a, b, k) for a, b in combinations(items, 2)]
    matrix = np.diag([float(k)] * len(items))
    for (i, j), p in zip(combinations(range(len(items)), 2), pairs, strict=True):
        matrix[i, j] = matrix[j, i] = p["overlap"]
    cells = {i.cell for i in items}
    return {
        "schema": SCHEMA, "k": k, "same_geometry": same,
        "inputs": [{"label": i.label, "source": shown_source(i.source), "layers": i.layers, "heads": i.heads,
                    "cell": i.cell, "ranking_only": i.scores is None, "top_k": i.ranking[:k],
                    "dead_heads": None if i.dead is None else sorted(i.dead)} for i in items],
        "cells_differ": len(cells) > 1,
        "pairs": pairs,
        "overlap_matrix": matrix.astype(int).tolist(),
    }


def verdict(pair: dict[str, Any]) -> str:
    """One sentence of markdown (names escaped): what the pair shares, against chance, and how their score maps
    agree."""
    text = f"{md(pair['a'])} and {md(pair['b'])} share {pair['overlap']} of their top-{pair['k']} heads"
    if pair["chance"] is not None:
        text += (f" (chance {pair['chance']:.2f} of {pair['population']} heads; hypergeometric "
                 f"p = {pval(pair['p_value'])})")
    if pair["spearman"] is not None:
        text += f"; Spearman over all {pair['population']} heads {pair['spearman']:.3f}"
        if pair.get("spearman_live") is not None:
            text += f" ({pair['spearman_live']:.3f} over the {pair['n_live']} heads live in both)"
    if pair.get("overlap_live") is not None:
        text += (f"; among the {pair['n_live']} live heads they share {pair['overlap_live']} of their live top-"
                 f"{pair['k']} (chance {pair['chance_live']:.2f}, p = {pval(pair['p_value_live'])})")
    elif pair.get("note"):
        text += f"; {md(pair['note'])}"
    return text + "."


def shown_source(source: str) -> str:
    """An input as compare.md prints it: a `paper:` list as given, a file by vrh_lmms.base.paths.shown_path."""
    return source if str(source).startswith("paper:") else shown_path(source)


def _num(x: float | None, fmt: str = ".3f") -> str:
    return "n/a" if x is None else format(x, fmt)


def compare_markdown(block: dict[str, Any], plot_name: str | None = None) -> str:
    k = block["k"]
    lines = [f"# Head sets compared (top-{k})", ""]
    lines += [f"- {verdict(p)}" for p in block["pairs"]]
    lines += ["", "| A | B | overlap | chance | p (hypergeometric) | Jaccard | Spearman | Spearman, live heads | "
              "overlap of live top-k (chance, p) |", "|---|---|---|---|---|---|---|---|---|"]
    for p in block["pairs"]:
        live = ("n/a" if p.get("overlap_live") is None else
                f"{p['overlap_live']} / {k} ({p['chance_live']:.2f}, {pval(p['p_value_live'])})")
        lines.append(f"| {md(p['a'])} | {md(p['b'])} | {p['overlap']} / {k} | {_num(p['chance'], '.2f')} | "
                     f"{pval(p['p_value'])} | {p['jaccard']:.3f} | {_num(p['spearman'])} | "
                     f"{_num(p.get('spearman_live'))} | {live} |")
    lines += ["", "| input | source | layers x heads | cell | top-k |", "|---|---|---|---|---|"]
    for i in block["inputs"]:
        cell = md(i["cell"] or "?") + (" (published ranking, no scores)" if i["ranking_only"] else "")
        lines.append(f"| {md(i['label'])} | {md_code(i['source'])} | {md(i['layers'])} x "
                     f"{md(i['heads'])} | {cell} | {', '.join(md(h) for h in i['top_k'])} |")
    lines += ["", "Chance is the expected overlap of two top-k sets drawn at random from the same N heads (k*k/N); the "
              "p value is the hypergeometric tail P(overlap >= observed). Spearman is the rank correlation of the two "
              "layer x head score maps over every head. Where a model has heads that write nothing (pruned: o_proj "
              "columns all zero), the live columns repeat the comparison over the heads live in both: each ranking "
              "without the dead heads, chance over the live pool."]
    if block["cells_differ"]:
        lines.append("The inputs were scored with different cells (see the input table).")
    if plot_name:
        lines += ["", f"![score maps]({plot_name})"]
    return "\n".join(lines) + "\n"
