"""Readers of run folders (sweep, discovery, lmms-eval output): run metadata and per-sample outcomes.

Pure file reading on the base floor, so that runs (dpo pairs, the KV cache), the report and the pipelines all read
folders the same way without climbing to the report.
"""
