"""`vrh-lmms demo`: discovery, the ablation sweep, the report and the recall step on the shipped tiny grounding VLM.

`stages`, `pipeline`, `transfer`, `recall` and `kcurve` (its plot) are the command. The model's data spec is
`vrh_lmms.base.synth.demo_spec`; how the model was trained (trainer, design p21, head pruning, the k-curve protocol
with its causal oracle) is the repository's research/demo_model, not part of the package.
"""
