"""`vrh-lmms replicate`: the paper's protocol on one model, stage by stage, resumable, with one report."""
