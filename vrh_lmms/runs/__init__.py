"""Runs: discover, sweep, steer, patch, maps, rank, kv-cache, DPO: jobs that load a model and write a run folder.
"""
