"""Interventions beyond zero-ablation (docs/interventions.md).

steering     bias chosen heads' answer-row attention toward other image tokens (sufficiency)
uniform      uniform answer-row attention over the causal prefix or its image tokens (ablation modes)
patching     copy head outputs between runs naming two objects; normalised logit-difference recovery
rows         answer rows and masks of one attention call, through generation with a KV cache
pairs        other objects of a doc's image: distractors and (A, B) pairs
steer_run, patch_run, folder   the lmms-eval-driven `vrh-lmms steer` / `vrh-lmms patch` runs
"""
