"""Statistics on paired per-sample outcomes: accuracy CIs, clustered bootstrap drops, exact McNemar,
top-k vs random-k null comparisons, multiplicity corrections and head-set overlap.

Pure numpy/scipy/statsmodels on arrays; nothing here reads files or knows about lmms-eval.
"""

from vrh_lmms.stats.accuracy import AccuracyResult, accuracy, is_binary
from vrh_lmms.stats.bootstrap import DropResult, bootstrap_mean_diffs, paired_bootstrap_drop
from vrh_lmms.stats.mcnemar import McNemarResult, exact_mcnemar
from vrh_lmms.stats.multiple import adjust_pvalues, benjamini_hochberg, holm
from vrh_lmms.stats.null import NullComparison, topk_vs_random
from vrh_lmms.stats.overlap import jaccard, topk_jaccard_matrix

__all__ = [
    "AccuracyResult",
    "DropResult",
    "McNemarResult",
    "NullComparison",
    "accuracy",
    "adjust_pvalues",
    "benjamini_hochberg",
    "bootstrap_mean_diffs",
    "exact_mcnemar",
    "holm",
    "is_binary",
    "jaccard",
    "paired_bootstrap_drop",
    "topk_jaccard_matrix",
    "topk_vs_random",
]
