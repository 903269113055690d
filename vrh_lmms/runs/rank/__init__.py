"""Retrieval heads as a ranker ("Can Retrieval Heads See Images?", heads as a page ranker).

Layers, lowest first: `spans` (input_ids -> each candidate image's token positions, pure), `scoring` (per-head
attention mass per candidate -> candidate scores, null-question calibrated, pure), `metrics` (scores -> Recall@k and
MRR with cluster-aware intervals, pure), `data` (queries with candidate images: a synthetic multi-image set and an
MMDocIR loader), `capture` (one multi-image forward -> per-head mass on each candidate), `outputs` (rank.json,
rank.md, plot). `vrh-lmms rank` sits on top; docs/applications.md ("Ranker") describes it.
"""
