"""The model floor: torch only. Named head sites, ablation, packing, capture, intervention mechanics, the KV policy,
tiny models.
"""
