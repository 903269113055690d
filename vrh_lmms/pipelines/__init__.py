"""Pipelines: the demo and replicate, which chain runs and reports.
"""
