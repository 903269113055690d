"""Shared code of the vrh task YAMLs: data sources, per-benchmark doc builders, prompts, scoring, records."""
