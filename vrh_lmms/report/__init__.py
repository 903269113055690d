"""`vrh-lmms report`: statistics, tables and plots from sweep folders and plain lmms-eval output folders.

Pipeline: `discover` finds results files, `runs` reads their metadata, `samples` reads per-sample outcomes,
`analysis` computes per model x task x configuration statistics, `comparisons` adds the top-k vs random nulls,
transfer rows and multiplicity corrections, `heads_files` reads heads files for heatmaps and overlap, then
`markdown` and `plots` render what `build` assembled. report.json is the single source of every rendered number.
"""

from vrh_lmms.report.build import ReportSettings, build_report

__all__ = ["ReportSettings", "build_report"]
