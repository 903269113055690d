"""VRH-aware KV cache: after prefill, KV groups holding no retrieval head forget the image tokens.

`policy` (pure: which (layer, KV group, position) keys stay, and the controls at the same budget), `apply` (exact
masking inside the attention function, or a cache that really shrinks), `evaluate` (lmms-eval runs of each policy
and budget), `outputs` (kv_cache.json / .md and the curve). The command `vrh-lmms kv-cache` sits on top;
docs/applications.md ('KV cache') describes it.
"""
