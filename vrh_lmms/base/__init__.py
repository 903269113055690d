"""The pure base: head sets and their draws, statistics, boxes, synthetic data, run-folder readers and writers, errors.
No torch, no lmms-eval.
"""
