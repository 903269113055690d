"""Which docs a top-k ablation breaks that its random controls leave alone, and the reverse (report.json's
`doc_filters`, the explorer's filters).

A configuration *breaks* a doc when its score there is below the baseline's (binary outcomes: the baseline was right,
the ablated model wrong). A control (the R draws of one kind at the same k) breaks a doc when at least half of its
draws do. Per top-k configuration and control kind: `topk_only` = docs top-k breaks and the control does not,
`control_only` = docs the control breaks and top-k does not; only docs every one of them scored are counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from vrh_lmms.base.heads import kinds


def broken(baseline: Mapping[str, float], scores: Mapping[str, float], docs: Iterable[str]) -> set[str]:
    """The docs of `docs` where the configuration scored below the baseline."""
    return {d for d in docs if scores[d] < baseline[d]}


def control_breaks(baseline: Mapping[str, float], draws: Sequence[Mapping[str, float]], docs: Iterable[str]
                   ) -> set[str]:
    """Docs at least half of the draws break."""
    docs = list(docs)
    counts = {d: 0 for d in docs}
    for draw in draws:
        for d in broken(baseline, draw, docs):
            counts[d] += 1
    return {d for d, n in counts.items() if 2 * n >= len(draws)}


def _doc_order(doc: str) -> tuple[int, int | str]:
    return (0, int(doc)) if doc.lstrip("-").isdigit() else (1, doc)


def doc_filters(summary: Sequence[Mapping], scores: Mapping[str, Mapping[str, float]]) -> list[dict]:
    """One entry per (top-k row of the group's summary, control kind with draws): the two doc lists and their
    counts. `scores`: configuration label -> doc id -> score, the baseline under "baseline"."""
    baseline = scores.get("baseline")
    out: list[dict] = []
    if not baseline:
        return out
    for row in summary:
        top = scores.get(row["config"])
        if top is None:
            continue
        for kind in kinds.CONTROLS:
            labels = [label for label in ((row.get(kind) or {}).get("labels") or []) if label in scores]
            if not labels:
                continue
            draws = [scores[label] for label in labels]
            shared = set(baseline).intersection(top, *draws)
            by_top = broken(baseline, top, shared)
            by_control = control_breaks(baseline, draws, shared)
            topk_only = sorted(by_top - by_control, key=_doc_order)
            control_only = sorted(by_control - by_top, key=_doc_order)
            out.append({"config": row["config"], "k": row["k"], "control": kind, "draws": labels,
                        "n_docs": len(shared), "rule": "broken: score below the baseline's; a control breaks a doc "
                                                        "when at least half of its draws do",
                        "topk_only": topk_only, "n_topk_only": len(topk_only),
                        "control_only": control_only, "n_control_only": len(control_only)})
    return out


def group_scores(members: Iterable) -> dict[str, dict[str, float]]:
    """configuration label (the summary's names) -> doc id -> score, from a group's loaded runs
    (vrh_lmms.report.analysis.LoadedRun)."""
    return {run.meta.label: dict(zip(run.table.doc_ids, np.asarray(run.table.scores, dtype=float).tolist(),
                                         strict=True))
            for run in members}
