"""Statistics on paired per-sample outcomes that stay valid when samples share an image: cluster-adjusted accuracy
CIs, the drop with a cluster-aware score interval (and a BCa cluster bootstrap), the cluster sign-flip test (with the
exact McNemar test beside it), top-k vs random-k empirical nulls, drops measured on an image subsample of the docs,
multiplicity corrections and head-set overlap.

Pure numpy/scipy/statsmodels on arrays; nothing here reads files or knows about lmms-eval.
"""

from vrh_lmms.base.stats.accuracy import AccuracyResult, accuracy, cluster_ci, is_binary
from vrh_lmms.base.stats.bootstrap import BootstrapResult, paired_bootstrap_drop
from vrh_lmms.base.stats.clusters import DesignEffect, cluster_totals, design_effect
from vrh_lmms.base.stats.distribution import share_above
from vrh_lmms.base.stats.drop import DropResult, paired_drop
from vrh_lmms.base.stats.interval import ALTERNATIVES, ConfidenceInterval
from vrh_lmms.base.stats.mcnemar import McNemarResult, exact_mcnemar
from vrh_lmms.base.stats.multiple import adjust_pvalues, benjamini_hochberg, holm
from vrh_lmms.base.stats.null import NullComparison, topk_vs_random
from vrh_lmms.base.stats.overlap import (
    TopkOverlap,
    hypergeom_tail,
    jaccard,
    score_spearman,
    topk_jaccard_matrix,
    topk_overlap,
)
from vrh_lmms.base.stats.signflip import SignFlipResult, sign_flip_test
from vrh_lmms.base.stats.subsample import SubsampleDrop, image_subsample, subsample_drop
from vrh_lmms.base.stats.tango import tango_interval

__all__ = [
    "ALTERNATIVES",
    "AccuracyResult",
    "ConfidenceInterval",
    "BootstrapResult",
    "DesignEffect",
    "DropResult",
    "McNemarResult",
    "NullComparison",
    "SignFlipResult",
    "SubsampleDrop",
    "TopkOverlap",
    "accuracy",
    "adjust_pvalues",
    "cluster_ci",
    "benjamini_hochberg",
    "cluster_totals",
    "design_effect",
    "exact_mcnemar",
    "holm",
    "hypergeom_tail",
    "image_subsample",
    "is_binary",
    "jaccard",
    "paired_bootstrap_drop",
    "paired_drop",
    "score_spearman",
    "share_above",
    "sign_flip_test",
    "subsample_drop",
    "tango_interval",
    "topk_jaccard_matrix",
    "topk_overlap",
    "topk_vs_random",
]
